"""Admission webhooks (`vk webhook`): the provider's Quota enforcement on the pods its
consumers' identities create."""
