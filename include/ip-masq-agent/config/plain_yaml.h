// SPDX-License-Identifier: Apache-2.0
// A fast scanner for the plain block YAML that config files almost always are: it drives
// the same yaml-cpp EventHandler as YAML::Parser, and leaves anything else to yaml-cpp.
#pragma once

#include <string_view>

#include <yaml-cpp/eventhandler.h>

namespace ipmasq {

// yaml-cpp's scanner costs ~2 µs a line (its character classes are matched one
// character at a time), which made parsing 70% of the agent's start with a long list.
// Most files are a handful of "key: value" lines and one or more block lists of
// CIDRs, which a line-by-line scan reads about 30 times faster.
//
// If `text` is, as a whole, in this subset:
//   - lines end with "\n" (the last one may not), every byte is printable ASCII;
//   - blank lines (nothing but spaces) and comment lines (spaces, then "#" and anything);
//   - at column 0, "key: value" or "key:" followed by a block list whose items are all
//     "- value" lines at one indentation;
//   - keys are letters and digits, starting with a letter; values are letters, digits,
//     ".", "/" and ":", do not end with ":" and are not a YAML null ("~", "null", ...);
//   - at least one key,
// then the handler receives exactly the events (with the same marks) that yaml-cpp's
// parser would send for it, and this returns true. Otherwise it returns false before
// sending any event, and the caller parses with yaml-cpp. Exceptions the handler throws
// pass through.
//
// The fuzz target fuzz_plain_yaml checks the claim: parsing any input with and without
// this scanner gives the same config, warnings and errors.
bool scanPlainYaml(std::string_view text, YAML::EventHandler &handler);

} // namespace ipmasq
