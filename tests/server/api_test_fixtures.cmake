# Read by ctest after api_tests' discovered tests: they run after the record file is reset and
# before the OpenAPI conformance check reads it.
foreach(test IN LISTS api_tests_TESTS)
  set_tests_properties("${test}" PROPERTIES FIXTURES_REQUIRED api_exchanges_reset
                                            FIXTURES_SETUP api_exchanges)
  # Sixteen sandboxes starting at once are a CPU-heavy test too: beside a TCG guest their agents
  # missed the 10 s handshake (tests/CMakeLists.txt, DESKBOX_HEAVY_TEST).
  if(test MATCHES "^Churn\\.")
    set_tests_properties("${test}" PROPERTIES RESOURCE_LOCK heavy_cpu COST 1000)
  endif()
endforeach()
