"""vk's controllers, one module per reconciler, run by `vk controller-manager`."""
