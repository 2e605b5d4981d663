// SPDX-License-Identifier: Apache-2.0
// The netlink backend: applies, removes, verifies and probes the agent's table in the kernel.
//
// Every change is one nf_tables transaction: the kernel applies it whole or not at all,
// and an error names the model object whose message the kernel refused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ip-masq-agent/error.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/ruleset.h"

namespace ipmasq {

class NetlinkBackend
{
public:
	// What this kernel supports of what the agent writes (into an inet table).
	struct KernelFeatures {
		bool fullyRandomMasquerade = false; // masquerade ... fully-random
		bool inetNat = false; // nat chains in family inet (Linux 5.2)
	};

	// Opens the socket and checks access with a harmless request, so that a missing
	// CAP_NET_ADMIN is reported here, once, rather than at the first change.
	static Result<std::unique_ptr<NetlinkBackend>> open();

	// Atomically replaces the table `ruleset.table` (creating it if missing) and
	// returns the ruleset generation id of that commit. On error nothing changed,
	// and the message names the object: "set nomasq-v4: File exists".
	Result<uint32_t> apply(const Ruleset &ruleset);

	// Deletes the table inet `table` in one transaction; a missing table is success.
	Status remove(const std::string &table);

	// The kernel's ruleset generation id (NFT_MSG_GETGEN): it changes with every
	// commit by anyone.
	Result<uint32_t> generation();

	// Whether the kernel's table is exactly the desired one: table, sets, elements,
	// chains and rules, userdata (comments) included. A missing table is false.
	Result<bool> matches(const Ruleset &ruleset);

	// Probes with check-only batches in a throw-away table: nothing is committed.
	Result<KernelFeatures> probeFeatures();

	// Our netlink port id: the kernel tags notifications of our commits with it.
	uint32_t portId() const { return socket_.portId(); }

private:
	explicit NetlinkBackend(netlink::Socket socket);

	Result<netlink::BatchAnswer> transact(const netlink::Batch &batch);
	Result<bool> matchesOnce(const std::string &desired, const std::string &table);

	netlink::Socket socket_;
};

} // namespace ipmasq
