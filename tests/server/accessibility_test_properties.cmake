# Read by ctest after accessibility_api_tests' discovered tests: each boots a desktop sandbox
# (Firefox, GTK apps), a CPU-heavy test (tests/CMakeLists.txt, DESKBOX_HEAVY_TEST).
foreach(test IN LISTS accessibility_api_tests_TESTS)
  set_tests_properties("${test}" PROPERTIES RESOURCE_LOCK heavy_cpu COST 1000 TIMEOUT 600)
endforeach()
