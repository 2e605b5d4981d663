// SPDX-License-Identifier: Apache-2.0
// How and where egress traffic is source-NATed: outputAddress (an address, a range, or this
// node's own address in a subnet) and output interface patterns (outputInterface,
// nonMasqueradeInterfaces), as values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/base/error.h"

namespace ipmasq {

// IFNAMSIZ is 16: a Linux interface name has at most 15 bytes before its NUL.
inline constexpr size_t kMaxInterfaceNameLength = 15;

// An interface as outputInterface and nonMasqueradeInterfaces list it: one name, or
// every name that starts with `name` (written "eth*", as nft does, or "eth+", as iptables
// does).
struct InterfacePattern {
	std::string name;
	bool wildcard = false;
	Origin origin; // where it was written; not part of comparisons

	std::string toString() const { return wildcard ? name + "*" : name; }
	bool operator==(const InterfacePattern &other) const
	{
		return name == other.name && wildcard == other.wildcard;
	}
};

// Whether traffic leaving through interface `name` is matched by `pattern`.
bool matchesInterface(const InterfacePattern &pattern, std::string_view name);

// "eth0", "eth*", "eth+". Refused: an empty name, more than 15 bytes, ".", "..", a "/",
// ":", whitespace, quotes, backslashes, control bytes (what Linux or nft refuse in a name),
// a wildcard anywhere but at the end, and "*" alone (it matches every interface: leave the
// key out instead). The message quotes the text and says which rule it broke.
Result<InterfacePattern> parseInterfacePattern(std::string_view text);

// nftables compares an output interface by the 16 bytes of its name, zero-padded. Held as
// a 128-bit value (an IntervalSet of Family::ipv6's width), a pattern is a range of such
// keys: one key for a name, every key that starts with the name's bytes for a wildcard.
AddressRange interfaceKeyRange(const InterfacePattern &pattern);

// The patterns that make up a range of interface keys, lowest first: the range cut into
// the largest blocks of keys that share whole leading bytes (a wildcard) or single keys (a
// name). For a range made of patterns (interfaceKeyRange), that is those patterns, none
// inside another; this is how a set of them is printed and sent to the kernel.
std::vector<InterfacePattern> interfacePatternsOf(const AddressRange &range);

// outputAddress (IPv4) or outputAddressIPv6: where traffic the agent masquerades is
// source-NATed instead.
struct OutputAddress {
	enum class Form {
		address, // "203.0.113.7": SNAT to it
		range,   // "203.0.113.7-203.0.113.9": SNAT spread over the range
		subnet,  // "203.0.113.0/24": SNAT to this node's own address in it
	};
	Form form = Form::address;
	// The address (first == last), the range, or the subnet's whole range.
	AddressRange range;
	unsigned prefixLength = 0; // the subnet's
	Origin origin;             // where it was written; not part of comparisons

	Family family() const { return range.first.family; }
	// As the config would write it, canonically: "203.0.113.7", "a-b", "203.0.113.0/24".
	std::string toString() const;
	bool operator==(const OutputAddress &other) const
	{
		return form == other.form && range == other.range && prefixLength == other.prefixLength;
	}
};

// One of the three forms. Refused: a range whose ends are of two families or in the wrong
// order, a CIDR with host bits set, anything that is none of the three.
Result<OutputAddress> parseOutputAddress(std::string_view text);

} // namespace ipmasq
