#!/usr/bin/env bash
# Self-signed bootstrap for clusters without cert-manager (and for local runs): a CA and a serving
# certificate for the webhook Service (or for 127.0.0.1 with --local), written to DIR, stored in
# the Secret kueuelog-webhook-tls unless --local, and the caBundle printed for webhooks.yaml.
#   deploy/webhook/selfsigned.sh [--local] [DIR]
set -euo pipefail
local_only=false
if [[ "${1:-}" == "--local" ]]; then local_only=true; shift; fi
dir="${1:-$(mktemp -d)}"
mkdir -p "$dir"
svc=kueuelog-webhook.kueuelog-system.svc
openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=kueuelog-webhook-ca" \
  -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
if $local_only; then san="IP:127.0.0.1,DNS:localhost"; else san="DNS:$svc,DNS:$svc.cluster.local"; fi
openssl req -newkey rsa:2048 -nodes -subj "/CN=${svc}" -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 825 \
  -extfile <(printf "subjectAltName=%s\nextendedKeyUsage=serverAuth\n" "$san") -out "$dir/tls.crt" 2>/dev/null
if ! $local_only; then
  kubectl -n kueuelog-system create secret tls kueuelog-webhook-tls --cert="$dir/tls.crt" --key="$dir/tls.key" \
    --dry-run=client -o yaml | kubectl apply -f -
fi
echo "certificates in $dir; caBundle for deploy/webhook/webhooks.yaml:" >&2
base64 -w0 < "$dir/ca.crt"; echo
