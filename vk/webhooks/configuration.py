"""The names that tie vk's webhook configurations (the chart's `webhook.yaml`) to `vk webhook`:
the configurations' name, each webhook's, and the path the server answers it at.

The offloading webhooks are called for pods created in namespaces labelled
`liqo.io/scheduling-enabled=true` (the offloaded ones, as the NamespaceOffloading controller
labels them), and for NamespaceOffloadings.

The ShadowPod webhooks are called for every ShadowPod created or updated: a consumer's identity
may write them only in its twin namespaces (RBAC, and the webhook checks it again), and a stamp
that counts usage is guarded wherever it is. They fail closed whatever the other webhooks do,
and have no side effects on a dry run. Pods are never sent to them: consumers create none.

The tenant-object webhooks are called for the ResourceSlices and NamespaceMaps a consumer's
control-plane identity creates or updates (its user alone, by a match condition): they bound
how many it keeps in its tenant namespace and how large (`vk.webhooks.tenancy`), and fail closed.
"""

from __future__ import annotations

# The MutatingWebhookConfiguration and the ValidatingWebhookConfiguration, both named so (the
# webhook writes its CA into them when it keeps its own certificate).
CONFIGURATION_NAME = "vk"
MUTATE_PATH = "/mutate-shadowpod"
VALIDATE_PATH = "/validate-shadowpod"
PLACE_POD_PATH = "/mutate-pod-offloading"
VALIDATE_OFFLOADING_PATH = "/validate-namespaceoffloading"
VALIDATE_TENANT_OBJECT_PATH = "/validate-tenant-object"
STAMP_WEBHOOK = "shadowpod.mutate.liqo.io"
SHADOW_POD_WEBHOOK = "shadowpod.validate.liqo.io"
PLACE_POD_WEBHOOK = "pod.mutate.liqo.io"
OFFLOADING_WEBHOOK = "namespaceoffloading.validate.liqo.io"
RESOURCE_SLICE_WEBHOOK = "resourceslice.validate.vk.io"
NAMESPACE_MAP_WEBHOOK = "namespacemap.validate.vk.io"
# The metrics agent's APIService (`vk.webhooks.metrics_agent`), whose CA the webhook writes too.
METRICS_API_SERVICE = "v1alpha1.metrics.vk.io"
