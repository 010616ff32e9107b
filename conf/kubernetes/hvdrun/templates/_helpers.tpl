{{/* Names: every object is named after the release (or fullnameOverride). */}}
{{- define "hvdrun.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The worker StatefulSet and its headless Service share this name, so
     pods are <fullname>-<i>.<fullname>. */}}
{{- define "hvdrun.workers" -}}{{ include "hvdrun.fullname" . }}{{- end -}}
{{- define "hvdrun.driver" -}}{{ include "hvdrun.fullname" . }}-driver{{- end -}}
{{- define "hvdrun.config" -}}{{ include "hvdrun.fullname" . }}-generated{{- end -}}
{{- define "hvdrun.sshSecret" -}}
{{- default (printf "%s-ssh" (include "hvdrun.fullname" .)) .Values.ssh.existingSecret -}}
{{- end -}}
{{- define "hvdrun.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hvdrun.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "hvdrun.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "hvdrun.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The label selector of the worker pods, as discovery uses it. */}}
{{- define "hvdrun.workerSelector" -}}
app.kubernetes.io/name={{ default .Chart.Name .Values.nameOverride }},app.kubernetes.io/instance={{ .Release.Name }},app.kubernetes.io/component=worker
{{- end -}}

{{/* image: (dict "root" $ "override" .Values.worker.image) */}}
{{- define "hvdrun.image" -}}
{{- $o := .override | default dict -}}
{{- $repo := default .root.Values.image.repository $o.repository -}}
{{- $tag := default (default .root.Chart.AppVersion .root.Values.image.tag) $o.tag -}}
{{- printf "%s:%s" $repo (toString $tag) -}}
{{- end -}}

{{/* Slots per worker: worker.slots, else the nvidia.com/gpu limit, else 1. */}}
{{- define "hvdrun.slots" -}}
{{- if .Values.worker.slots -}}
{{- int .Values.worker.slots -}}
{{- else -}}
{{- $gpu := int (dig "limits" "nvidia.com/gpu" 0 (.Values.worker.resources | default dict)) -}}
{{- if gt $gpu 0 }}{{ $gpu }}{{ else }}1{{ end -}}
{{- end -}}
{{- end -}}

{{- define "hvdrun.maxReplicas" -}}
{{- max (int .Values.worker.replicas) (int (.Values.elastic.maxReplicas | default 0)) -}}
{{- end -}}

{{- define "hvdrun.np" -}}
{{- if .Values.elastic.np }}{{ int .Values.elastic.np }}{{ else }}{{ mul (int .Values.worker.replicas) (int (include "hvdrun.slots" .)) }}{{ end -}}
{{- end -}}
{{- define "hvdrun.minNp" -}}
{{- if .Values.elastic.minNp }}{{ int .Values.elastic.minNp }}{{ else }}{{ include "hvdrun.np" . }}{{ end -}}
{{- end -}}
{{- define "hvdrun.maxNp" -}}
{{- if .Values.elastic.maxNp }}{{ int .Values.elastic.maxNp }}{{ else }}{{ mul (int (include "hvdrun.maxReplicas" .)) (int (include "hvdrun.slots" .)) }}{{ end -}}
{{- end -}}

{{/* -p PORT for hvdrun when sshd is not on 22 (hvdrun also reads the
     driver's ~/.ssh/config, which sets Port; the flag wins and works with
     any hvdrun). */}}
{{- define "hvdrun.portFlag" -}}
{{- if ne (int .Values.ssh.port) 22 }} -p {{ int .Values.ssh.port }}{{ end -}}
{{- end -}}

{{/* The hvdrun command lines (NOTES.txt and the ConfigMap). */}}
{{- define "hvdrun.staticCommand" -}}
hvdrun -np {{ include "hvdrun.np" . }} --hostfile /etc/hvdrun/generated/hostfile{{ include "hvdrun.portFlag" . }}
{{- end -}}
{{- define "hvdrun.elasticCommand" -}}
hvdrun -np {{ include "hvdrun.np" . }} --min-np {{ include "hvdrun.minNp" . }} --max-np {{ include "hvdrun.maxNp" . }}
{{- if eq .Values.elastic.discovery "script" }} --host-discovery-script /etc/hvdrun/generated/discover_hosts.sh
{{- else }} --kubernetes-selector {{ include "hvdrun.workerSelector" . }} --kubernetes-namespace {{ .Release.Namespace }} --kubernetes-slots {{ include "hvdrun.slots" . }} --kubernetes-host-names dns
{{- end }}
{{- with .Values.elastic.blacklistCooldownRange }} --blacklist-cooldown-range {{ index . 0 }} {{ index . 1 }}{{ end }}
{{- /* hvdrun's drain ends 15 s before the pods stop waiting (75 -> 60, its default) */}}
{{- if ne (int .Values.worker.drainSeconds) 75 }} --elastic-drain-timeout {{ max 0 (sub (int .Values.worker.drainSeconds) 15) }}{{ end }}
{{- include "hvdrun.portFlag" . }}
{{- end -}}

{{/* Scheduling for a role: (dict "root" $ "role" .Values.worker) */}}
{{- define "hvdrun.scheduling" -}}
{{- $ns := .role.nodeSelector | default .root.Values.nodeSelector -}}
{{- $tol := .role.tolerations | default .root.Values.tolerations -}}
{{- $aff := .role.affinity | default .root.Values.affinity -}}
{{- with $ns }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $tol }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $aff }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Volumes every pod has: the SSH secret, the generated ConfigMap, the
     dataset PVC, /dev/shm. */}}
{{- define "hvdrun.commonVolumes" -}}
- name: ssh-secret
  secret:
    secretName: {{ include "hvdrun.sshSecret" . }}
    defaultMode: 0400
- name: generated
  configMap:
    name: {{ include "hvdrun.config" . }}
    defaultMode: 0555
{{- if .Values.dataset.existingClaim }}
- name: dataset
  persistentVolumeClaim:
    claimName: {{ .Values.dataset.existingClaim }}
    readOnly: {{ .Values.dataset.readOnly }}
{{- end }}
{{- if .Values.shmSize }}
- name: shm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .Values.shmSize }}
{{- end }}
{{- end -}}

{{- define "hvdrun.commonMounts" -}}
- name: ssh-secret
  mountPath: /etc/hvdrun/ssh
  readOnly: true
- name: generated
  mountPath: /etc/hvdrun/generated
  readOnly: true
{{- if .Values.dataset.existingClaim }}
- name: dataset
  mountPath: {{ .Values.dataset.mountPath }}
  {{- with .Values.dataset.subPath }}
  subPath: {{ . }}
  {{- end }}
  readOnly: {{ .Values.dataset.readOnly }}
{{- end }}
{{- if .Values.shmSize }}
- name: shm
  mountPath: /dev/shm
{{- end }}
{{- end -}}

{{- define "hvdrun.commonEnv" -}}
- name: HVD_SSH_PORT
  value: {{ .Values.ssh.port | int | quote }}
- name: HVD_SSH_SECRET_DIR
  value: /etc/hvdrun/ssh
- name: HVD_HOSTFILE
  value: /etc/hvdrun/generated/hostfile
- name: HVD_WORKER_SERVICE
  value: {{ include "hvdrun.workers" . }}
- name: HVD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: HVD_CLUSTER_DOMAIN
  value: {{ .Values.clusterDomain | quote }}
{{- end -}}
