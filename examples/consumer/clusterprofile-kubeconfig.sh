#!/usr/bin/env bash
# A ClusterProfile consumer, the way the Cluster Inventory API intends: read a spoke's ClusterProfile on the
# hub, take the `open-cluster-management` access provider (written by the cluster-proxy addon manager) and the
# token managed-serviceaccount synced next to it, and talk to the spoke through cluster-proxy.
#
#   examples/consumer/clusterprofile-kubeconfig.sh cluster1 [namespace] [msa-name]
#
# The provider's server (https://cluster-proxy-addon-user.<ns>:9092/<cluster>) resolves only inside the hub,
# so this forwards the user server to localhost: `localhost` is in its certificate's SANs, so the CA from
# the provider still verifies it. The token is kept in a 0600 temporary file and never printed.
set -euo pipefail

cluster=${1:?usage: $0 CLUSTER [NAMESPACE] [MSA]}
namespace=${2:-cluster-inventory}
msa=${3:-inventory-reader}
hub=${HUB_CONTEXT:-kind-hub}
addon_ns=${ADDON_NAMESPACE:-open-cluster-management-addon}
port=${LOCAL_PORT:-19092}

for tool in kubectl jq base64; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found on PATH" >&2; exit 1; }
done

profile=$(kubectl --context "$hub" -n "$namespace" get clusterprofile "$cluster" -o json) || {
  echo "error: no ClusterProfile $namespace/$cluster on $hub: is a set with $cluster bound in $namespace?" >&2
  exit 1
}
provider=$(jq -ce '.status.accessProviders[]? | select(.name == "open-cluster-management") | .cluster' <<<"$profile") || {
  echo "error: ClusterProfile $namespace/$cluster has no open-cluster-management access provider yet" >&2
  echo "       (cluster-proxy must run with its ClusterProfile gate and have its user serving cert)" >&2
  exit 1
}
server=$(jq -r '.server' <<<"$provider")
path=${server#https://*/}            # the cluster name the user server routes on

workdir=$(mktemp -d)
trap 'kill ${pf_pid:-} 2>/dev/null || true; rm -rf "$workdir"' EXIT
umask 077
jq -r '."certificate-authority-data"' <<<"$provider" | base64 -d >"$workdir/ca.crt"
kubectl --context "$hub" -n "$namespace" get secret "$cluster-$msa" -o jsonpath='{.data.token}' | base64 -d >"$workdir/token"
[ -s "$workdir/token" ] || { echo "error: Secret $namespace/$cluster-$msa holds no token (is $msa labelled to sync?)" >&2; exit 1; }

kubectl --context "$hub" -n "$addon_ns" port-forward svc/cluster-proxy-addon-user "$port:9092" >/dev/null 2>&1 &
pf_pid=$!
for _ in $(seq 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done

cat >"$workdir/kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: $cluster
  cluster:
    server: https://localhost:$port/$path
    certificate-authority: $workdir/ca.crt
users:
- name: $msa
  user:
    tokenFile: $workdir/token
contexts:
- name: $cluster
  context: {cluster: $cluster, user: $msa}
current-context: $cluster
KUBECONFIG

echo "ClusterProfile $namespace/$cluster → $server"
echo "properties:"
jq -r '.status.properties[]? | "  \(.name)=\(.value)"' <<<"$profile"
echo "the spoke answers through cluster-proxy:"
kubectl --kubeconfig "$workdir/kubeconfig" version -o json | jq -r '"  server version \(.serverVersion.gitVersion)"'
kubectl --kubeconfig "$workdir/kubeconfig" get namespaces
