#!/bin/sh
# Copy each node's snapshot out of its gpudoctor-snapshot pod into DIR (one NODE.json a node),
# then judge them: gpudoctor check --snapshot DIR
set -eu
dir=${1:?usage: collect.sh DIR}
mkdir -p "$dir"
kubectl -n gpudoctor get pods -l app.kubernetes.io/name=gpudoctor-snapshot \
  -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}' |
while read -r pod node; do
  kubectl -n gpudoctor exec "$pod" -- cat "/snapshots/$node.json" > "$dir/$node.json" ||
    echo "gpudoctor: no snapshot from $node ($pod)" >&2
done
