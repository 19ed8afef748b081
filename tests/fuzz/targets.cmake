# The fuzz targets, by what they link (tests/fuzz/CMakeLists.txt builds them with libFuzzer,
# tests/diag/CMakeLists.txt builds fuzz_replay_<t> for each, tests/fuzz/run.sh and scripts/fuzz.sh
# run them; their corpora are tests/fuzz/corpus/<t>/).
# libcoll's pure functions
set(FUZZ_LIB_TARGETS uniqueid wire config)
# libcoll's stateful listeners, driven by fake peers (each includes its .c file)
set(FUZZ_LIB_INTERNAL_TARGETS root listener)
# the agent socket: agent_ipc (both sides' decoders), nccl_ipc (NCCL's env plugin), agent_reply
# (the library's client)
set(FUZZ_IPC_TARGETS agent_ipc nccl_ipc agent_reply)
# (pod_ranks, k8s-agent/pod_ranks.c, is built on its own in both files)
# coll-agent's parsers, with the Kubernetes API answered from the input (fake_kube.c)
set(FUZZ_AGENT_TARGETS agent_server webhook kubeconfig standalone pod comm)
