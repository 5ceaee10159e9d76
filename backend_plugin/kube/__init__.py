"""The Kubernetes client layer of the connector, and nothing of Flyte: the API client as client-go uses it (`api`:
one request as a value, the deadline-bounded retry of `retry`, paged reads, the server's clock), the watch cache of
the jobs (`watch`: LIST, then WATCH from the list's resourceVersion, as client-go's reflector does), and Kubernetes'
time format (`timestamps`). It names no job kind and imports no SDK; the kubernetes client is imported only where a
request is made.
"""
