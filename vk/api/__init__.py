"""Liqo's v1beta1 API as vk speaks it: models, constants and CRD generation.

Depends on nothing else in vk. Import the submodule you need (`vk.api.constants`,
`vk.api.identity`, `vk.api.authentication`, `vk.api.offloading`, `vk.api.core`, `vk.api.crds`);
this package exports nothing, so importing it stays cheap.
"""
