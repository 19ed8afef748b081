# The fuzz targets (sourced by tests/fuzz/run.sh and scripts/fuzz.sh); keep in step with
# tests/fuzz/targets.cmake, which builds them.
# shellcheck disable=SC2034
FUZZ_TARGETS=(uniqueid wire config root listener agent_ipc nccl_ipc agent_reply agent_server webhook
    kubeconfig standalone pod pod_ranks comm)
