"""What each job kind does with a task: its `JobTarget` (`targets/<kind>/target.py`: plan, writer, status table, log
links, fitting to an older installed CRD), behind the interface in `base.py`, and the registry that picks one
(`registry.py`). The facts each kind declares are `backend_plugin.kinds`: the targets read them, the config and the
admission model, which read them too, never read a target.
"""
