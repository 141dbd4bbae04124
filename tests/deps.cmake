# Test dependencies: what scripts/install-deps.sh installs for the tests (cmocka, rdma-core headers, python3 with
# matplotlib, shellcheck, ibverbs-utils). A missing one used to make a whole tier of tests disappear without a word
# (no cmocka: no unit, unit-rdma or doctor tests). Now each directory that needs one calls
#
#   gdrnet_test_dep_missing(<dep> <what is not built or run> <how to get it>)
#
# and with GDRNET_REQUIRE_TEST_DEPS=ON -- the default when the environment has CI=true, which .ci/run sets -- the
# configure fails with that message. Otherwise it is a WARNING, a test "skipped.<dep>" that exits 77 (CTest's summary
# lists it among the tests that did not run; it fails if the tests run with CI=true), and a line in
# <build>/skipped-tests.txt, which scripts/test.sh prints at the end of its run.
#
#   gdrnet_tests_off(<name> <what is not built or run> <why>)
#
# records tests left out on purpose by the configuration (e.g. -DGDRNET_WITH_RDMA=OFF): listed the same way, never an
# error.
if(NOT DEFINED GDRNET_REQUIRE_TEST_DEPS)
  set(_gdrnet_ci "$ENV{CI}")
  string(TOLOWER "${_gdrnet_ci}" _gdrnet_ci)
  if(_gdrnet_ci STREQUAL "true" OR _gdrnet_ci STREQUAL "1")
    set(_gdrnet_require ON)
  else()
    set(_gdrnet_require OFF)
  endif()
  option(GDRNET_REQUIRE_TEST_DEPS "Fail the configure when a test dependency is missing (default: ON when CI=true)"
         ${_gdrnet_require})
endif()
set(GDRNET_SKIPPED_TESTS_FILE ${PROJECT_BINARY_DIR}/skipped-tests.txt)
file(WRITE ${GDRNET_SKIPPED_TESTS_FILE} "")

function(_gdrnet_test_skipped kind name what why)
  string(MAKE_C_IDENTIFIER "${name}" _id)
  file(APPEND ${GDRNET_SKIPPED_TESTS_FILE} "${kind} ${name}: ${what} -- ${why}\n")
  if(GDRNET_BUILD_TESTS)
    set(_msg "${kind} ${name}: ${what} -- ${why}")
    if(kind STREQUAL "missing")
      # fails under CI=true at test time too (a build configured without CI, run by CI)
      add_test(NAME skipped.${_id}
               COMMAND sh -c "echo \"$0\"; case \"$CI\" in true|TRUE|1) echo 'CI=true: a missing test dependency fails the run'; exit 1;; esac; exit 77"
                       "${_msg}")
    else()
      add_test(NAME skipped.${_id} COMMAND sh -c "echo \"$0\"; exit 77" "${_msg}")
    endif()
    set_tests_properties(skipped.${_id} PROPERTIES SKIP_RETURN_CODE 77 LABELS "skipped" TIMEOUT 10)
  endif()
endfunction()

function(gdrnet_test_dep_missing dep what how)
  if(GDRNET_REQUIRE_TEST_DEPS)
    message(FATAL_ERROR "test dependency missing: ${dep}: ${what}. ${how}. (GDRNET_REQUIRE_TEST_DEPS is ON"
                        " because CI=true; configure with -DGDRNET_BUILD_TESTS=OFF to build without tests.)")
  endif()
  message(WARNING "test dependency missing: ${dep}: ${what}. ${how}.")
  _gdrnet_test_skipped(missing "${dep}" "${what}" "${how}")
endfunction()

function(gdrnet_tests_off name what why)
  message(STATUS "tests off: ${name}: ${what} (${why})")
  _gdrnet_test_skipped(off "${name}" "${what}" "${why}")
endfunction()
