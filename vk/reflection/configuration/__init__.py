"""What offloaded pods read their configuration from: ConfigMaps, Secrets, ServiceAccount
tokens."""
