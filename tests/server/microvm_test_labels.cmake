# Read by ctest after microvm_tests' discovered tests (see CMakeLists.txt).
foreach(test IN LISTS microvm_tests_TESTS microvm_api_tests_TESTS)
  set_tests_properties("${test}" PROPERTIES LABELS "slow;microvm")
endforeach()
