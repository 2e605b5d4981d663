// SPDX-License-Identifier: Apache-2.0
// One packet the NAT conflict check evaluates: what the desired state samples from the
// config (policy.h) and the check consumes (other_tables/conflicts.h), without either side
// including the other's model.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/base/error.h"

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
	// "198.18.0.0", "198.18.0.0 from 198.51.100.0 port 53/udp": for the debug log.
	std::string toString() const;
};

// At most `limit` of `items`, evenly spaced from the first: how every bound of the samples
// cuts, so that a long list is still sampled across its whole range.
template<typename T>
std::vector<T> spreadEvenly(const std::vector<T> &items, size_t limit)
{
	if (items.size() <= limit)
		return items;
	std::vector<T> out;
	out.reserve(limit);
	for (size_t i = 0; i < limit; i++)
		out.push_back(items[i * items.size() / limit]);
	return out;
}

// The first host of a family where a sample would take the all-zeros address, which stands
// for no host: 0.0.0.1, and ::2 for IPv6 (::1 is the loopback, local to every node, which
// the agent's `fib daddr type != local` leaves alone whatever the config says).
Address firstSampledHost(Family family);

// The config entry that decides a destination, in --explain's words ("nonMasqueradeCIDRs
// 198.18.0.0/15 (FILE:LINE)", "no entry covers it"): made with the desired state from the
// config (policy.h, decidingEntries), kept without it, so that the NAT conflict check can
// name addresses it samples long after the config is gone.
class DecidingEntries
{
public:
	virtual ~DecidingEntries() = default;
	virtual std::string describe(const Address &destination) const = 0;
};

// What the NAT conflict check samples for one desired state: the config's own packets, and
// what it needs to sample more where other tables' rules match (other_tables/samples.h).
struct SamplePlan {
	std::vector<SampledPacket> packets;
	// Names any destination; nullptr: nothing is sampled beyond `packets`.
	std::shared_ptr<const DecidingEntries> entries = {};
};

} // namespace ipmasq
