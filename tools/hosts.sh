#!/usr/bin/env bash
# A multi-host test bed on one machine (needs root): N "hosts", each a Linux
# network namespace with its own address, joined by veth pairs to a bridge
# that lives in a namespace of its own, so nothing is added to this
# machine's own network. The addresses (198.18.0.0/24, a range reserved for
# network tests) exist only inside these namespaces. Each host has a name of
# its own (NAME-hI, in a UTS namespace per command) that resolves, on every
# host, to its address (an /etc/hosts of the test bed's own, which `ip netns
# exec` mounts from /etc/netns/NAME-hI/), as host names do in a cluster.
# Every host sees the same file system unless a test gives it a directory of
# its own.
#   tools/hosts.sh up NAME N        create NAME-sw and NAME-h0 .. NAME-h{N-1}
#   tools/hosts.sh down NAME N      delete them (missing ones are fine)
#   tools/hosts.sh addr I           the address of host I (198.18.0.(I+1))
#   tools/hosts.sh exec NAME I CMD  run CMD on host I (its host name NAME-hI)
#   tools/hosts.sh names NAME M0 M1 ...
#                                   how host I's own name resolves there, as
#                                   on real machines: own (its address, the
#                                   default), loopback (127.0.0.1, as in
#                                   many container images), debian
#                                   (127.0.1.1, Debian's /etc/hosts), none
#                                   (not at all); other hosts' names resolve
#                                   to their addresses
#   tools/hosts.sh cut NAME I       unplug host I (its link goes down)
#   tools/hosts.sh plug NAME I      plug it back in (returns once the other
#                                   hosts reach it again, or after 5 s)
# NAME keeps concurrent test beds apart (short: interface names are derived
# from it and limited to 15 characters).
set -euo pipefail

addr() { echo "198.18.0.$(( $1 + 1 ))"; }

case "${1:-}" in
  up)
    name="$2"; n="$3"
    ip netns add "$name-sw"
    ip -n "$name-sw" link set lo up
    ip -n "$name-sw" link add br0 type bridge
    ip -n "$name-sw" link set br0 up
    for i in $(seq 0 $(( n - 1 ))); do
      ns="$name-h$i"
      ip netns add "$ns"
      ip -n "$ns" link set lo up
      # One end in the host, one on the bridge.
      ip -n "$ns" link add eth0 type veth peer name "p$i" netns "$name-sw"
      ip -n "$name-sw" link set "p$i" master br0
      ip -n "$name-sw" link set "p$i" up
      ip -n "$ns" addr add "$(addr "$i")/24" dev eth0
      ip -n "$ns" link set eth0 up
    done
    for i in $(seq 0 $(( n - 1 ))); do
      mkdir -p "/etc/netns/$name-h$i"
      { printf '127.0.0.1 localhost\n::1 localhost\n'
        for j in $(seq 0 $(( n - 1 ))); do printf '%s %s\n' "$(addr "$j")" "$name-h$j"; done
      } >"/etc/netns/$name-h$i/hosts"
    done
    ;;
  down)
    name="$2"; n="$3"
    for i in $(seq 0 $(( n - 1 ))); do
      ip netns del "$name-h$i" 2>/dev/null || true
      rm -rf "/etc/netns/$name-h$i"
    done
    ip netns del "$name-sw" 2>/dev/null || true
    rmdir /etc/netns 2>/dev/null || true  # (only when no other test bed uses it)
    ;;
  names)
    name="$2"; shift 2
    modes=("$@"); n=${#modes[@]}
    for i in $(seq 0 $(( n - 1 ))); do
      { printf '127.0.0.1 localhost\n::1 localhost\n'
        for j in $(seq 0 $(( n - 1 ))); do
          if [ "$j" -ne "$i" ]; then printf '%s %s\n' "$(addr "$j")" "$name-h$j"; continue; fi
          case "${modes[$i]}" in
            own) printf '%s %s\n' "$(addr "$j")" "$name-h$j" ;;
            loopback) printf '127.0.0.1 %s\n' "$name-h$j" ;;
            debian) printf '127.0.1.1 %s\n' "$name-h$j" ;;
            none) ;;
            *) echo "hosts.sh names: unknown mode '${modes[$i]}'" >&2; exit 2 ;;
          esac
        done
      } >"/etc/netns/$name-h$i/hosts"
    done
    ;;
  addr)
    addr "$2"
    ;;
  exec)
    name="$2"; i="$3"; shift 3
    exec ip netns exec "$name-h$i" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name-h$i" "$@"
    ;;
  cut)
    ip -n "$2-sw" link set "p$3" down
    ;;
  plug)
    name="$2"; i="$3"
    ip -n "$name-sw" link set "p$i" up
    # Back only once the other hosts reach it again: each sends it a
    # datagram (nothing listens; it makes the kernel resolve the address)
    # until its neighbour entry there is REACHABLE, for up to 5 s.
    for ns in $(ip netns list | awk '{print $1}' | grep "^$name-h[0-9]*$" | grep -v "^$name-h$i$"); do
      for _ in $(seq 50); do
        ip netns exec "$ns" bash -c "echo > /dev/udp/$(addr "$i")/9" 2>/dev/null || true
        ip -n "$ns" neigh show "$(addr "$i")" | grep -q REACHABLE && break
        sleep 0.1
      done
    done
    ;;
  *)
    sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
