#!/usr/bin/env python3
"""Splits `perf script` samples of dpd into buckets by what the sampled
stack is doing, and (given dpbench's results.json) into busy microseconds
per connection (or per request for throughput).

A sample goes to the first bucket whose pattern matches a frame, walking
from the leaf towards the root, so work is charged where it happens:
AWS-LC's public-key code is "public-key crypto" whether rustls or our
record layer called it.

    profile-buckets.py perf.script [results.json]
"""
import json
import re
import sys

# (bucket, frame pattern), in the order they are tried on each frame.
BUCKETS = [
    ("public-key crypto (ECDSA/RSA sign, ECDH)",
     r"ec_GFp|ecdsa|ECDSA|p256|p384|nistz|x25519|X25519|curve25519|bn_|BN_|rsa_|RSA_|ec_point|ec_scalar|EC_|fiat_|mont"),
    ("symmetric crypto and hashing (AES-GCM, SHA, HKDF)",
     r"aes|AES|gcm|GCM|ghash|sha256|sha384|sha512|SHA|hkdf|HKDF|hmac|HMAC|md_|EVP_|sha2::|crypto::kdf|crypto::hashing"),
    ("kernel (syscalls, page faults)", r"\[kernel\.kallsyms\]|^entry_|^__x64_sys|do_syscall"),
    ("allocation", r"^malloc|^free$|^cfree|^realloc|^calloc|_int_malloc|_int_free|__rust_alloc|__rust_dealloc|__rdl_|alloc::raw_vec|memalign"),
    ("our TLS record layer", r"crypto::record|crypto::session::.*(seal|open|record)"),
    ("rustls (handshake state machine, messages)", r"rustls::"),
    ("our TLS glue (sessions, certificates)", r"crypto::"),
    ("port I/O (memif, mbufs)", r"memif|eth_memif|rte_|mempool|dataplane::port|dataplane::dpdk"),
    ("TCP", r"dataplane::tcp"),
    ("engine, interface, responder", r"dataplane::"),
    ("copies (memcpy/memset)", r"memcpy|memmove|memset"),
]
COMPILED = [(b, re.compile(p)) for b, p in BUCKETS]


def samples(path):
    """Yields each sample's frames (symbol names), leaf first."""
    frames = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                if frames:
                    yield frames
                frames = []
                continue
            if line[0] not in " \t":
                continue  # the sample's header line
            parts = line.strip().split(None, 1)
            if len(parts) < 2:
                continue
            sym = parts[1]
            # "symbol+0x1f (dso)" -> "symbol (dso)" keeping the dso for
            # the kernel bucket.
            sym = re.sub(r"\+0x[0-9a-f]+", "", sym)
            frames.append(sym)
    if frames:
        yield frames


def bucket_of(frames):
    for frame in frames:
        for name, pat in COMPILED:
            if pat.search(frame):
                return name
    return "other"


def main():
    counts = {}
    total = 0
    for frames in samples(sys.argv[1]):
        b = bucket_of(frames)
        counts[b] = counts.get(b, 0) + 1
        total += 1
    if total == 0:
        print("no samples")
        return
    per = None
    unit = "connection"
    if len(sys.argv) > 2:
        res = json.load(open(sys.argv[2]))["results"][0]
        run = res["runs"][0]
        if res["test"] == "throughput":
            unit = "request (1 MiB)"
        per = run.get("dut_us_per_conn")
    order = [b for b, _ in BUCKETS] + ["other"]
    head = f"| bucket | share | µs per {unit} |" if per else "| bucket | share |"
    print(head)
    print("|---|---|---|" if per else "|---|---|")
    for b in order:
        n = counts.get(b, 0)
        if n == 0:
            continue
        share = n / total
        if per:
            print(f"| {b} | {share * 100:.1f} % | {share * per:.1f} |")
        else:
            print(f"| {b} | {share * 100:.1f} % |")
    if per:
        print(f"| all ({total} samples) | 100 % | {per:.1f} |")


if __name__ == "__main__":
    main()
