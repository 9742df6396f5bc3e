# Read by ctest after the discovered tests (see CMakeLists.txt): issue 26's regression tests
# living in larger executables get the label "hostile".
foreach(test IN LISTS sandbox_manager_tests_TESTS api_tests_TESTS)
  if(test MATCHES "AMicrovmRefusesDiskMb|FillingTmpAndShmThenAMemoryBomb")
    set_tests_properties("${test}" PROPERTIES LABELS "hostile")
  endif()
endforeach()
