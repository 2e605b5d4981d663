// SPDX-License-Identifier: Apache-2.0
// The headers most test files include, compiled once per test executable (meson's cpp_pch,
// test/unit/meson.build and test/integration/meson.build): Catch2's single header, the
// standard library, fmt and the system's socket headers. Only an accelerator: every test
// file still includes what it uses. No layer's header here: a test's `using namespace`
// would meet names it does not expect.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
// glibc's <netinet/in.h> before any kernel header that includes <linux/in.h>: the two
// coexist only in that order.
#include <netinet/in.h>
#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "ip-masq-agent/base/error.h"
