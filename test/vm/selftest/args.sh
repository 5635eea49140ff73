#!/bin/bash
# args.sh is the guest half of the runner contract check in run-all: it
# echoes its arguments and environment, writes to stderr, exits 3.
printf 'arg=[%s]\n' "$@"
echo "node=$RDMAD_NODE nodes=$RDMAD_NODES addr=$RDMAD_NODE_ADDR peers=[$RDMAD_PEERS] vm=$RDMAD_VM pwd=$PWD"
echo "to-stderr" >&2
exit 3
