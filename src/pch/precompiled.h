// SPDX-License-Identifier: Apache-2.0
// The headers most of the core library's files include, compiled once per build
// (meson's cpp_pch, src/meson.build): a quarter of a build's CPU (a release build of the
// agent took 207 s of user CPU without it, 151 s with it, on the 2-core machine). Only an
// accelerator, outside the layer folders: every file still includes what it uses, which
// CI checks with a build without it (-Db_pch=false). Standard, fmt and base/ headers only:
// a layer's header here would put its names in scope in every file (model/ruleset.h's
// Chain beside nft::Chain made evaluator.cpp ambiguous).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include <fmt/format.h>
// glibc's <netinet/in.h> before any kernel header that includes <linux/in.h>: the two
// coexist only in that order, and a unity build (the container image's, -Dunity=on)
// joins files that include them in either.
#include <netinet/in.h>
#include <linux/netfilter/nf_tables.h>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/base/log.h"
