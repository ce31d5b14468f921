#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for meshseg's SLURM tests and for trying the
# batch scripts of docs/scaling.md: munged, slurmctld and slurmd, with every file of the
# cluster (slurm.conf, state, spool, logs, pid files) under one folder.
#
#   scripts/slurm/start-local-cluster.sh [DIR]     (root; DIR defaults to /tmp/meshseg-slurm)
#   export SLURM_CONF=DIR/slurm.conf               (what sbatch, srun, sinfo then read)
#   scripts/slurm/stop-local-cluster.sh [DIR]
#
# Installs Debian's slurm-wlm and munge with apt when they are absent (exit status 3 when
# that is impossible: not root, or no apt-get). The node is this machine as `slurmd -C`
# describes it; two partitions: debug (the default) and urgent, whose jobs preempt debug's
# by requeueing them (PreemptMode=REQUEUE). Credentials expire after 10 s and the scheduler
# runs every 2 s, so a requeued job runs again within about 15 s.
set -euo pipefail
dir=$(realpath -m "${1:-/tmp/meshseg-slurm}")
SECONDS=0
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "slurm-wlm and munge are not installed, and apt-get as root is unavailable" >&2
    exit 3
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurm-wlm munge >/dev/null
fi
"$(dirname "$0")/stop-local-cluster.sh" "$dir" >/dev/null 2>&1 || true

# munge: one daemon per machine; one that answers already is used and left running.
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key && chmod 0600 /etc/munge/munge.key
  fi
  mkdir -p /run/munge && chown munge:munge /run/munge && chmod 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged
  munge -n | unmunge >/dev/null
  cp /run/munge/munged.pid "$dir/munged.pid"  # started here: stopped with the cluster
fi

# The daemons' ports (slurmctld 6817, slurmd 6818) must be free: an earlier cluster that
# still runs is named, not fought with.
for port in 6817 6818; do
  if (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null; then
    holder=$(pgrep -a -f '^/usr/sbin/slurm(ctld|d) ' | tr '\n' ';')
    echo "port $port is taken (${holder:-by another program}); stop that cluster first" >&2
    exit 1
  fi
done

mkdir -p "$dir"/{state,spool,log}
chmod 0755 "$dir"  # slurmctld runs as the slurm user, which must reach state/ and log/
chown slurm:slurm "$dir"/state "$dir"/log
node=$(slurmd -C | head -n 1)  # NodeName=<short hostname> CPUs=... RealMemory=...
cat > "$dir/slurm.conf" <<CONF
ClusterName=meshseg-local
SlurmctldHost=localhost
SlurmUser=slurm
AuthType=auth/munge
AuthInfo=cred_expire=10
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobRequeue=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
ReturnToService=2
MpiDefault=none
MpiParams=ports=12000-12999
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
KillWait=10
EnforcePartLimits=ALL
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2
CONF
export SLURM_CONF="$dir/slurm.conf"
/usr/sbin/slurmctld -f "$SLURM_CONF"  # both daemonize
/usr/sbin/slurmd -f "$SLURM_CONF"
node_state() { timeout 5 sinfo -h -p debug -o %T 2>/dev/null || true; }
deadline=$((SECONDS + 60))
until [ "$(node_state)" = idle ] || [ $SECONDS -ge $deadline ]; do sleep 0.5; done
if [ "$(node_state)" != idle ]; then
  echo "the node did not become idle:" >&2
  timeout 5 sinfo >&2 || true
  tail -n 5 "$dir"/log/*.log >&2 || true
  exit 1
fi
echo "slurm up in ${SECONDS}s; export SLURM_CONF=$SLURM_CONF"
