# Every dependency comes from Debian 12 packages (deploy/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)       # nlohmann-json3-dev
find_package(yaml-cpp REQUIRED)                 # libyaml-cpp-dev (target: yaml-cpp)
find_package(CLI11 CONFIG REQUIRED)             # libcli11-dev
find_package(fmt REQUIRED)                      # libfmt-dev
find_package(spdlog REQUIRED)                   # libspdlog-dev
find_package(tl-expected REQUIRED)              # libexpected-dev (target: tl::expected)
find_package(dlpack REQUIRED)                   # libdlpack-dev (target: dlpack::dlpack)
find_package(prometheus-cpp CONFIG REQUIRED)   # prometheus-cpp-dev 1.0.1 (targets: prometheus-cpp::core, ::pull)
find_package(Boost 1.74 REQUIRED)              # libboost-dev: Beast/Asio, header-only (target: Boost::headers)
find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL) # libssl-dev
# hiredis 0.14 (libhiredis-dev) ships no CMake target; its pkg-config file does.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
# libseccomp 2.5 (libseccomp-dev): the evaluation child's syscall filter (common/process/seccomp.h).
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)
if(ATREX_BUILD_TESTS)
  find_package(GTest REQUIRED)                  # libgtest-dev, libgmock-dev
endif()
