#!/usr/bin/env bash
# Stops the slurmd and slurmctld that start-local-cluster.sh started in DIR (default
# /tmp/meshseg-slurm), and munged if it started that too, by the pids in their pid files,
# after checking that each still names that daemon.
set -uo pipefail
dir=$(realpath -m "${1:-/tmp/meshseg-slurm}")
for daemon in slurmd slurmctld munged; do
  pid=$(cat "$dir/$daemon.pid" 2>/dev/null) || continue
  if [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$daemon" ]; then
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$dir/$daemon.pid"
done
