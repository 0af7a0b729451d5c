"""How offloaded pods are reached: Services and Ingresses."""
