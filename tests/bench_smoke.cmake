# Every benchmark under bench/ runs in its smoke mode (--smoke: tiny sizes, one or two
# iterations, bench/RESULTS.md and the plots left alone), so that a change to an
# output format or a loop that breaks a benchmark fails the suite instead of rotting
# unnoticed. A script that cannot run here (netns.sh without root or namespaces; the
# peers not built by bench/setup-peers.sh) exits 77: ctest reports it as skipped.
foreach(script comm control kernel priority sweep netns peers)
  add_test(NAME bench_smoke_${script}
    COMMAND bash ${PROJECT_SOURCE_DIR}/bench/${script}.sh --smoke)
  set_tests_properties(bench_smoke_${script} PROPERTIES
    TIMEOUT 300
    SKIP_RETURN_CODE 77
    # They time what they run: one at a time, and not beside the other tests.
    RUN_SERIAL TRUE)
endforeach()
