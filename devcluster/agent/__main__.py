import sys

from devcluster.agent.main import main

main(sys.argv[1:])
