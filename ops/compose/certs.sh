#!/usr/bin/env bash
# A throwaway certificate authority and one TLS certificate per party, for a demo or a test of
# the compose stack over HTTPS on one host:
#
#   ops/compose/certs.sh tls party-a party-b
#   ops/compose/certs.sh tls party-a=a.pirq.example,203.0.113.7 party-b
#
# writes tls/ca.pem (give it to clients: `pirq query --ca-cert tls/ca.pem`), tls/ca.key, and per
# party tls/<party>/cert.pem and tls/<party>/key.pem: what the compose gateway mounts from
# PIRQ_TLS_DIR (ops/party-a.env names tls/party-a). Every party gets its own key: a client refuses
# two parties that present the same certificate key (they would be one operator). Each certificate
# names localhost, 127.0.0.1 and ::1, plus the host names and IP addresses given after `=`.
#
# A real deployment has one certificate per operator from a CA its clients trust, and never
# shares a CA key between the two operators (docs/deploy.md). This script is for one host.
#
# The keys are readable by the gateway image's user (uid 10001): chowned to it when run as root,
# else left readable by all (a throwaway on a demo host). Existing files are kept; remove the
# directory to start again. Needs openssl.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DIR PARTY[=NAME,...] [PARTY[=NAME,...]...]" >&2; exit 2; }
out=$1
shift
command -v openssl >/dev/null || { echo "certs: openssl is not installed" >&2; exit 1; }
mkdir -p "$out"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
days=${PIRQ_CERT_DAYS:-30}

if [ ! -s "$out/ca.pem" ]; then
    (umask 077 && openssl req -x509 "${ec[@]}" -keyout "$out/ca.key" -out "$out/ca.pem" -days "$days" \
        -subj "/CN=pirq throwaway CA $(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
        2>/dev/null)
    chmod 0644 "$out/ca.pem"
    echo "certs: made the CA $out/ca.pem (key $out/ca.key, $days days)" >&2
fi

for spec in "$@"; do
    party=${spec%%=*}
    names=""
    [ "$spec" = "$party" ] || names=${spec#*=}
    case $party in
        "" | *[!A-Za-z0-9._-]*) echo "certs: bad party name '$party'" >&2; exit 2 ;;
    esac
    dir=$out/$party
    if [ -s "$dir/cert.pem" ] && [ -s "$dir/key.pem" ]; then
        echo "certs: $dir has a certificate already (kept)" >&2
        continue
    fi
    mkdir -p "$dir"
    san="DNS:localhost,IP:127.0.0.1,IP:::1"
    IFS=, read -r -a extra <<<"$names"
    for n in "${extra[@]}"; do
        if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then san+=",IP:$n"; else san+=",DNS:$n"; fi
    done
    work=$(mktemp -d)
    (umask 077 && openssl req "${ec[@]}" -keyout "$dir/key.pem" -out "$work/csr.pem" -subj "/CN=$party" 2>/dev/null)
    printf '%s\n' "subjectAltName=$san" "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$work/ext"
    openssl x509 -req -in "$work/csr.pem" -CA "$out/ca.pem" -CAkey "$out/ca.key" -CAcreateserial \
        -CAserial "$out/ca.srl" -out "$dir/cert.pem" -days "$days" -extfile "$work/ext" 2>/dev/null
    rm -rf "$work"
    if [ "$(id -u)" -eq 0 ]; then
        chown 10001:10001 "$dir/key.pem"
        chmod 0400 "$dir/key.pem"
    else
        chmod 0644 "$dir/key.pem"
    fi
    chmod 0755 "$dir"
    chmod 0644 "$dir/cert.pem"
    echo "certs: $dir/cert.pem for $party ($san)" >&2
done
