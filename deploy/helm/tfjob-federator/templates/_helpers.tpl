{{/* The objects' name: the release's, when it names the chart already. */}}
{{- define "tfjob-federator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tfjob-federator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tfjob-federator.fullname" . }}
{{- end -}}

{{/*
The namespace of the member kubeconfig Secrets and of the signing key: fixed
in the controller (SECRETS_NAMESPACE in crates/tfjob-core/src/api/member.rs),
whatever namespace the controller runs in.
*/}}
{{- define "tfjob-federator.secretsNamespace" -}}
tfjob-federator
{{- end -}}

{{/* The Role's rules, in one Role or (another namespace) two. */}}
{{- define "tfjob-federator.leaseRules" }}
  # Leader election (`run --leader-elect`): the Lease `tfjob-federator` in
  # this namespace, created by the first replica, then renewed by the leader.
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, create, update]
{{- end }}
{{- define "tfjob-federator.secretRules" }}
  # Member kubeconfigs, in Secrets `join` writes here (label
  # app.kubernetes.io/managed-by=tfjob-federator). A MemberCluster naming a
  # Secret in another namespace is refused (not Ready), so no Secret outside
  # this namespace is ever read. Create: the key the controller signs its
  # pods, services and job statuses with (Secret
  # tfjob-federator-signing-key), and the mark of when it began to seal
  # statuses (Secret tfjob-federator-sealing-since, no data), each made by
  # the first controller that needs it.
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, list, watch, create]
{{- end }}
