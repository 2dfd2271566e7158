#!/usr/bin/env bash
# Scans a TLS VIP of dpd with independent TLS security kits: testssl.sh
# (Debian's) and sslyze (pip). dpd runs in a lab of its own with an
# RSA-2048 and an ECDSA P-256 certificate (a throwaway CA) on a built-in
# responder VIP; the kits run from the client namespace. Prints each
# kit's findings; the full reports stay in OUT. Run as root.
#
#   scripts/tls-scan.sh [DPD] [OUT]
#
#   DPD   the dpd binary (default target/release/dpd: build it first)
#   OUT   where the reports go (default /tmp/tlsdp-tls-scan)
set -euo pipefail
cd "$(dirname "$0")/.."

DPD=$(realpath "${1:-target/release/dpd}")
OUT=${2:-/tmp/tlsdp-tls-scan}
LAB=tlsdp-scan
NET=10.81.0
WORK=$(mktemp -d /tmp/tlsdp-scan.XXXXXX)
DPD_PID=
mkdir -p "$OUT"

cleanup() {
    if [ -n "$DPD_PID" ] && kill -0 "$DPD_PID" 2>/dev/null; then
        kill -TERM "$DPD_PID" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$DPD_PID" 2>/dev/null || break; sleep 0.1; done
    fi
    scripts/lab.sh down "$LAB" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

(
    cd "$WORK"
    openssl req -x509 -nodes -days 90 -subj /CN=tlsdp-scan-ca -newkey ec \
        -pkeyopt ec_paramgen_curve:P-256 -keyout ca.key -out ca.pem 2>/dev/null
    printf 'subjectAltName=DNS:scan.tlsdp\nbasicConstraints=critical,CA:FALSE\ncrlDistributionPoints=URI:http://ca.scan.tlsdp/crl.pem\n' > ext
    for kind in rsa ec; do
        case $kind in
            rsa) key=(-newkey rsa:2048) ;;
            ec) key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256) ;;
        esac
        openssl req -new -nodes -subj /CN=scan.tlsdp "${key[@]}" -keyout "$kind.key" \
            -out "$kind.csr" 2>/dev/null
        openssl x509 -req -in "$kind.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 90 \
            -extfile ext -out "$kind.crt" 2>/dev/null
        cat "$kind.crt" ca.pem > "$kind.pem"
        chmod 600 "$kind.key"
    done
)
cat > "$WORK/dpd.toml" <<TOML
[eal]
lcores = [1]
args = ["--in-memory"]

[[port]]
name = "p0"
device = "net_af_packet0,iface=veth-dut"
address = "$NET.1/24"

[[vip]]
name = "https"
listen = "$NET.1:443"
respond = "builtin"
certs = [{ cert = "$WORK/rsa.pem", key = "$WORK/rsa.key" }, { cert = "$WORK/ec.pem", key = "$WORK/ec.key" }]

[control]
socket = "$WORK/control.sock"
TOML

LAB_NET=$NET scripts/lab.sh up "$LAB" >/dev/null
ip netns exec "$LAB-dut" "$DPD" --config "$WORK/dpd.toml" >"$OUT/dpd.log" 2>&1 &
DPD_PID=$!
for _ in $(seq 100); do [ -S "$WORK/control.sock" ] && break; sleep 0.1; done
[ -S "$WORK/control.sock" ] || { cat "$OUT/dpd.log"; echo "dpd did not come up" >&2; exit 1; }

echo "== testssl.sh ($(testssl --version 2>/dev/null | grep -o 'testssl *[0-9.]*' | head -1))"
rm -f "$OUT/testssl.json" "$OUT/testssl.log"
ip netns exec "$LAB-cli" testssl --quiet --color 0 --warnings off --ip "$NET.1" \
    --add-ca "$WORK/ca.pem" --jsonfile "$OUT/testssl.json" --logfile "$OUT/testssl.log" \
    scan.tlsdp:443 >/dev/null 2>&1 || true
# Every finding that is not OK or INFO (the kit's own severities), apart
# from those about what a lab cannot have: a certificate's revocation
# URIs and DNS CAA records, HTTP headers of the built-in responder (not a
# web application), and the scanning host's own openssl.
python3 - "$OUT/testssl.json" <<'PY'
import json, sys
findings = json.load(open(sys.argv[1]))
lab = ("cert_revocation", "DNS_CAArecord", "HSTS", "security_headers", "engine_problem")
bad = [f for f in findings if f.get("severity") not in ("OK", "INFO")]
print(f"{len(findings)} findings, {len(bad)} not OK/INFO")
for f in bad:
    note = "  (lab: not the TLS stack)" if f["id"].startswith(lab) else ""
    print(f"  {f['severity']:8} {f['id']}: {f['finding']}{note}")
PY

echo "== sslyze"
ip netns exec "$LAB-cli" sslyze --json_out "$OUT/sslyze.json" "$NET.1:443" >"$OUT/sslyze.log" 2>&1 || true
python3 - "$OUT/sslyze.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for s in report["server_scan_results"]:
    print(f"scan: {s['scan_status']}")
    for name, r in (s.get("scan_result") or {}).items():
        if not r or r.get("status") == "NOT_SCHEDULED":
            continue
        if r.get("status") != "COMPLETED":
            print(f"  {name}: {r.get('status')} {r.get('error_reason')} {(r.get('error_trace') or '')[-200:]}")
            continue
        res = r.get("result") or {}
        if "accepted_cipher_suites" in res:
            suites = [c["cipher_suite"]["name"] for c in res["accepted_cipher_suites"]]
            print(f"  {name}: {len(suites)} accepted {' '.join(suites)}")
        elif name == "elliptic_curves":
            print(f"  {name}: {' '.join(c['name'] for c in res['supported_curves'])}")
        elif name != "certificate_info":
            print(f"  {name}: {json.dumps(res)}")
PY
