// SPDX-License-Identifier: Apache-2.0
// The netlink backend: applies, removes, verifies and probes the agent's table in the kernel.
//
// Every change is one nf_tables transaction: the kernel applies it whole or not at all,
// and an error names the model object whose message the kernel refused.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/error.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/ruleset.h"
#include "ip-masq-agent/table_backend.h"

namespace ipmasq {

class NftablesMonitor;

class NetlinkBackend final : public TableBackend
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
	Result<uint32_t> apply(const Ruleset &ruleset) override;

	// Element-level update guarded by `generation` (see TableBackend): a stale
	// generation fails with ERESTART, and nothing changed.
	Result<uint32_t> updateElements(const std::string &table, const ElementDiff &diff,
					uint32_t generation) override;

	// Deletes the table inet `table` in one transaction; a missing table is success.
	Status remove(const std::string &table);

	// The kernel's ruleset generation id (NFT_MSG_GETGEN): it changes with every
	// commit by anyone.
	Result<uint32_t> generation() override;

	// Whether the kernel's table is exactly the desired one: table, sets, elements,
	// chains and rules, userdata (comments) included. A missing table is different.
	// The table is read with several dumps; when other commits interrupt them a few
	// times in a row, the answer is TableCheck::unsettled, never an error.
	Result<TableCheck> check(const Ruleset &ruleset) override;

	// check() for tests and tools that need a yes or no: unsettled is an EAGAIN error.
	Result<bool> matches(const Ruleset &ruleset);

	Result<std::optional<std::vector<AddressSet>>> readAddressSets(const std::string &table) override;

	// Leave `monitor`'s notification group during every commit (null: never). While
	// anyone listens, the kernel builds one notification per set element, which
	// doubles the cost of a large apply; the caller compares generations afterwards.
	void quietDuringCommits(NftablesMonitor *monitor) { quietMonitor_ = monitor; }

	// Probes with check-only batches in a throw-away table: nothing is committed.
	Result<KernelFeatures> probeFeatures();

	// Our netlink port id: the kernel tags notifications of our commits with it.
	uint32_t portId() const { return socket_.portId(); }

private:
	explicit NetlinkBackend(netlink::Socket socket);

	Result<netlink::BatchAnswer> transact(const netlink::Batch &batch);
	// transact() with the change monitor out of its group meanwhile (see
	// quietDuringCommits()).
	Result<netlink::BatchAnswer> transactQuietly(const netlink::Batch &batch);
	Result<bool> matchesOnce(const std::string &desired, const std::string &table);
	Result<std::optional<std::vector<AddressSet>>> readAddressSetsOnce(const std::string &table);

	netlink::Socket socket_;
	NftablesMonitor *quietMonitor_ = nullptr;
};

} // namespace ipmasq
