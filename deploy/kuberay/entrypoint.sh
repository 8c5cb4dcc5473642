#!/usr/bin/env bash
# The RayJob's entrypoint: start the population, or continue it on a retry.
#
#   entrypoint.sh EXPERIMENT_FILE RESULTS_DIR
#
# RESULTS_DIR (storage/name, on the volume every pod mounts) names this run. When a
# previous attempt of the RayJob (backoffLimit) got as far as saving Tune's state there,
# this attempt resumes that population (`workbench resume`: same trials, same MLflow runs,
# from their last checkpoints); otherwise it starts it (`workbench run`). A folder left by
# an attempt that died before Tune saved anything holds nothing to resume and would make
# `workbench run` refuse the name: it is moved aside, not deleted.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 EXPERIMENT_FILE RESULTS_DIR" >&2
    exit 2
fi
file=$1
results=${2%/}
storage=$(dirname "$results")
name=$(basename "$results")

# A RayJob's driver can start before every worker pod has joined: let the pre-flight wait
# for the nodes the trials need instead of refusing them at once.
export WORKBENCH_WAIT_FOR_RESOURCES_S=${WORKBENCH_WAIT_FOR_RESOURCES_S:-600}

if [[ -f $results/tuner.pkl && -f $results/workbench_experiment.yaml ]]; then
    echo "entrypoint: $results holds this run (an earlier attempt): resuming it"
    exec workbench resume "$results"
fi
if [[ -d $results ]] && [[ -n $(ls -A "$results") ]]; then
    aside=$results.incomplete-$(date -u +%Y%m%dT%H%M%SZ)
    echo "entrypoint: $results holds no Tune state (an attempt died before it started);" \
        "moved to $aside"
    mv "$results" "$aside"
fi
echo "entrypoint: starting $file as $results"
exec workbench run "$file" --set "storage=$storage" --name "$name"
