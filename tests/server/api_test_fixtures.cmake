# Read by ctest after api_tests' discovered tests: they run after the record file is reset and
# before the OpenAPI conformance check reads it.
foreach(test IN LISTS api_tests_TESTS)
  set_tests_properties("${test}" PROPERTIES FIXTURES_REQUIRED api_exchanges_reset
                                            FIXTURES_SETUP api_exchanges)
endforeach()
