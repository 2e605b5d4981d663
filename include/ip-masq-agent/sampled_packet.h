// SPDX-License-Identifier: Apache-2.0
// One packet the NAT conflict check evaluates: what the desired state samples from the
// config (policy.h) and the check consumes (other_tables/conflicts.h), without either side
// including the other's model.
#pragma once

#include <optional>
#include <string>

#include "ip-masq-agent/cidr.h"
#include "ip-masq-agent/error.h"

namespace ipmasq {

// A transport protocol and destination port, as --explain-port gives them (443/tcp).
struct PortProtocol {
	uint8_t protocol = 0; // IPPROTO_TCP, _UDP, _SCTP, _UDPLITE or _DCCP
	uint16_t port = 0;
	bool operator==(const PortProtocol &) const = default;
	std::string toString() const; // "443/tcp"
};
// "PORT/PROTOCOL" (443/tcp; udp, sctp, udplite, dccp), or an error naming the value.
Result<PortProtocol> parsePortProtocol(const std::string &text);

// The first packet of a connection from `source` (or from any source of the family) to
// `destination`, leaving by `outputInterface` (nullopt: not known, so a rule that matches
// on it "may").
struct SampledPacket {
	Address destination;
	std::optional<Address> source = {};
	std::optional<std::string> outputInterface = {};
	// nullopt: any protocol and port (a match on them "may").
	std::optional<PortProtocol> transport = {};
	// The config entry that decides it, in --explain's words: "nonMasqueradeCIDRs
	// 198.18.0.0/15 (FILE:LINE)", "built-in default 10.0.0.0/8", "no entry covers it".
	std::string entry = {};
	bool operator==(const SampledPacket &) const = default;
};

} // namespace ipmasq
