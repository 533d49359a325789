#!/usr/bin/env bash
# Writes an HAProxy configuration (Debian's haproxy, 2.6) that spreads requests over several
# `leoam serve` replicas, each with its own --kv-dir, so that every question about one document
# goes to the replica that holds that document's KV in its prompt cache (docs/scale-out.md).
#
# Usage: scripts/haproxy-config.sh LISTEN REPLICA [REPLICA...] > haproxy.cfg
#   LISTEN    address:port HAProxy serves the API on
#   REPLICA   address:port of a `leoam serve`
# Environment:
#   LEOAM_HASH_BYTES   the request body's first bytes hashed to pick a replica (default 2048): they
#                      hold the document, which comes before the question; a body shorter than
#                      this is hashed whole
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 LISTEN REPLICA [REPLICA...] > haproxy.cfg" >&2
  exit 2
fi
listen=$1
shift
hash_bytes=${LEOAM_HASH_BYTES:-2048}
cat <<CFG
global
  # A request's body is buffered up to this size before the hash is taken.
  tune.bufsize 65536

defaults
  mode http
  timeout connect 5s
  # A long document's prefill and a long answer take minutes.
  timeout client 30m
  timeout server 30m
  option http-buffer-request

frontend leoam
  bind ${listen}
  default_backend leoam_replicas

backend leoam_replicas
  # Consistent hashing on the body's start: the same document, the same replica; a replica that
  # goes down moves only its own documents, to be prefilled again elsewhere.
  balance hash req.body,bytes(0,${hash_bytes})
  hash-type consistent
  option httpchk GET /health
  http-check expect status 200
  # A request refused by a replica that died under it is retried on another.
  retries 2
  option redispatch
CFG
i=0
for replica in "$@"; do
  i=$((i + 1))
  echo "  server replica${i} ${replica} check inter 1s fall 2 rise 1"
done
