"""Two hosts on this machine for the tests of runs across nodes: the helper lives in the package
(`suites.studies.netns_hosts`), where the namespace link study uses it too."""
from suites.studies.netns_hosts import Hosts, missing, two_hosts

__all__ = ["Hosts", "missing", "two_hosts"]
