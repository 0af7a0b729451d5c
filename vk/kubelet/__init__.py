"""The kubelet HTTPS API of a virtual node: what the consumer's API server calls for
`kubectl logs`, `exec`, `attach` and `port-forward`, relayed to the provider's API server."""
