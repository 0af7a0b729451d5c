"""Reflection: what the virtual kubelet keeps in step between the consumer and a provider.

Pods and the objects they use go out to the provider (local → remote), their status and Events
come back; `forge/` holds the pure functions that build each side's objects from the other's.
"""
