#!/usr/bin/env bash
# Test certificates for the peers and dpbench: a throwaway CA and one server
# certificate per key type (RSA-2048, ECDSA P-256, ECDSA P-384), all for the
# name bench.test and the lab DUT address. Private keys stay in DIR (never
# committed). Idempotent: existing files are kept.
#
#   scripts/peers/certs.sh DIR
#   LAB_NET=10.77.0   the lab /24 (the DUT is .1)
set -euo pipefail
dir=${1:?usage: certs.sh DIR}
net=${LAB_NET:-10.77.0}
mkdir -p "$dir"
cd "$dir"
umask 077
if [ ! -s ca.pem ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
        -subj "/CN=dpbench test CA" -keyout ca.key -out ca.pem 2>/dev/null
fi
for k in rsa2048 p256 p384; do
    [ -s "$k.pem" ] && continue
    case $k in
        rsa2048) opt=(-newkey rsa:2048) ;;
        p256) opt=(-newkey ec -pkeyopt ec_paramgen_curve:P-256) ;;
        p384) opt=(-newkey ec -pkeyopt ec_paramgen_curve:P-384) ;;
    esac
    openssl req -new "${opt[@]}" -nodes -subj "/CN=bench.test" -keyout "$k.key" -out "$k.csr" 2>/dev/null
    printf 'subjectAltName=DNS:bench.test,IP:%s.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' "$net" > "$k.ext"
    openssl x509 -req -in "$k.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
        -extfile "$k.ext" -out "$k.crt" 2>/dev/null
    cat "$k.crt" "$k.key" > "$k.pem"   # HAProxy wants both in one file
    rm -f "$k.csr" "$k.ext"
done
chmod 0644 ca.pem ./*.crt
echo "certificates in $dir: ca.pem rsa2048 p256 p384"
