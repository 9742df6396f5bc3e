# Read by ctest after template_microvm_tests' discovered tests (see CMakeLists.txt).
foreach(test IN LISTS template_microvm_tests_TESTS)
  set_tests_properties("${test}" PROPERTIES LABELS "slow;microvm;templates")
endforeach()
