"""Runnable checks of parbench itself (harness overhead, coordination overhead): each prints figures."""
