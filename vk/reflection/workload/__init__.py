"""Reflection of workloads: the pods bound to the virtual node."""
