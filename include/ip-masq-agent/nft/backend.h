// SPDX-License-Identifier: Apache-2.0
// The netlink backend: applies, removes and verifies the agent's table in the kernel.
//
// Every change is one nf_tables transaction: the kernel applies it whole or not at all,
// and an error names the model object whose message the kernel refused.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/nft/objects.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/nft/table_backend.h"
#include "ip-masq-agent/nft/table_read.h"

namespace ipmasq {

class NftablesMonitor;

class NetlinkBackend final : public TableBackend
{
public:
	// What this kernel refused of what the agent writes, learned from the real
	// commits (backend_features.cpp): no probe runs before the first apply.
	struct KernelLimits {
		bool noFullyRandom = false; // masquerade fully-random refused: sent without it
	};

	// Opens the socket and checks access with a harmless request, so that a missing
	// CAP_NET_ADMIN is reported here, once, rather than at the first change.
	static Result<std::unique_ptr<NetlinkBackend>> open();

	// Atomically replaces the table `ruleset.table` (creating it if missing) and
	// returns the ruleset generation id of that commit. On error nothing changed,
	// and the message names the object: "set nomasq-v4: File exists". A table of that
	// name held by another process with the flag "owner" is an EPERM error that says so
	// and names the process (its netlink port, and its pid when /proc shows it).
	// When the kernel refuses masquerade fully-random, the table is sent again without
	// it (as upstream does when iptables lacks --random-fully), a warning says so once,
	// and every later apply() and check() leaves it out. A kernel without NAT in the
	// inet family (Linux < 5.2) gets an error that says which kernel is needed.
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
	// chains, rules and flowtables, userdata (comments) included, and the generation it was
	// so at. A missing table is different. The table is read consistently however often
	// other tables commit (nft/table_read.h); when commits to the table itself (or lost
	// notifications) spoil the read a few times in a row, the answer is
	// TableCheck::unsettled, never an error. At the generation of the last read, nothing
	// is read again; a check that finds the table intact keeps no read.
	Result<CheckedTable> check(const Ruleset &ruleset) override;

	// check() for tests and tools that need a yes or no: unsettled is an EAGAIN error.
	Result<bool> matches(const Ruleset &ruleset);

	// Read as check() reads; a table that kept changing while it was read is an EAGAIN
	// error.
	Result<std::optional<KernelTable>> readTable(const std::string &table) override;

	// The named counters of inet `table` and their values (none when it does not exist),
	// read now; they are also what the next replacement starts its counters at, should the
	// table be gone by then.
	Result<std::vector<CounterValue>> readCounters(const std::string &table) override;

	// What the guard's over sets among `sets` (the desired ruleset's dynamic sets with a
	// counter) hold in inet `table`: every key over a limit, its attempts over. A set the
	// table lacks reads as none. At most the sets' sizes (guard_reader.cpp): --explain's.
	Result<std::vector<GuardOverKey>> readGuardOver(const std::string &table,
						       const std::vector<DynamicSet> &sets);
	// The guard's reading for the daemon's pass and --snat-usage: one dump of each of `sets`
	// in inet `table`. Of each over set, the `top` keys with the most attempts (the most
	// first) and its count; of every other set, its count, without a libnftnl object per
	// element. A set the table lacks is left out. What it costs: docs/performance.md.
	Result<GuardReading> readGuard(const std::string &table, const std::vector<DynamicSet> &sets,
				       size_t top);

	// Leave `monitor`'s notification group during every commit (null: never). While
	// anyone listens, the kernel builds one notification per set element, which
	// doubles the cost of a large apply; the caller compares generations afterwards.
	void quietDuringCommits(NftablesMonitor *monitor) { quietMonitor_ = monitor; }

	const KernelLimits &kernelLimits() const { return limits_; }

	// Fault hook for tests: make commits look as they do to a kernel that predates
	// masquerade fully-random (the flag bit becomes one no kernel knows, which it
	// refuses with EINVAL), until apply() learns to leave the flag out.
	void simulateKernelWithoutFullyRandom() { simulateNoFullyRandom_ = true; }

	// Fault hook for tests: TableReader::onEachRead().
	void onEachRead(std::function<void()> hook) { reader_.onEachRead(std::move(hook)); }

	// Our netlink port id: the kernel tags notifications of our commits with it.
	uint32_t portId() const { return socket_.portId(); }

private:
	explicit NetlinkBackend(netlink::Socket socket);

	// What the kernel may refuse for want of a feature, by the object that carries it.
	enum class Feature { fullyRandomMasquerade, inetNat };
	struct FeatureCarrier {
		const void *object; // the EncodedChain or EncodedRule: Batch::sourceOf()
		Feature feature;
	};

	Result<netlink::BatchAnswer> transact(const netlink::Batch &batch);
	// transact() with the change monitor out of its group meanwhile (see
	// quietDuringCommits()).
	Result<netlink::BatchAnswer> transactQuietly(const netlink::Batch &batch);
	// Sends a batch on inet `table`: the commit's generation (and `done` in the debug log,
	// with the batch's size), or the error that names the refused object (its feature
	// noted in refusedFeature_). ERESTART, a generation guard that someone's commit made
	// stale, fails with `stale` and the kernel's words.
	Result<uint32_t> commit(const std::string &table, const netlink::Batch &batch,
				const std::vector<FeatureCarrier> &carriers, const std::string &stale,
				const std::string &done);
	// One attempt of apply(): the table created when the read finds none, replaced keeping
	// its counter objects (replacement.h) when it can, else deleted and created whole.
	Result<uint32_t> commitTable(const Ruleset &ruleset);
	// Reads, plans and commits the replacement that keeps the table's counters (or creates
	// a table the read finds absent) under the generation guard of each read, a few times
	// over; nullopt when the table must be replaced whole (another comment or flags, or the
	// guard refused every attempt).
	std::optional<Result<uint32_t>> replaceKeepingCounters(const Ruleset &ruleset,
							       netlink::EncodedTable &encoded,
							       const std::vector<FeatureCarrier> &carriers);
	// Keeps `values` as the last seen of their names (others stay as they were).
	void remember(const std::vector<CounterValue> &values);
	// encodeRuleset() with what this kernel refused left out (and the fault hook's flag).
	Result<netlink::EncodedTable> encodeForKernel(const Ruleset &ruleset) const;
	// The encoded objects of `ruleset` that carry a feature this kernel may lack.
	std::vector<FeatureCarrier> featureCarriers(const Ruleset &ruleset,
						    const netlink::EncodedTable &encoded) const;
	// The feature a refused commit lacked, if the first refused message (`seq`) carried
	// one and the errno is the one its absence causes.
	static std::optional<Feature> refusedFeature(const netlink::Batch &batch,
						     const std::vector<FeatureCarrier> &carriers,
						     uint32_t seq, int error);
	// After an EPERM (or while lockedOut_): the error that names the process holding
	// inet `table` with the flag "owner" (NFT_TABLE_F_OWNER), if another socket holds it;
	// nullopt otherwise. Sets lockedOut_ accordingly.
	std::optional<Error> refusedByOwner(const std::string &table);

	netlink::Socket socket_;
	netlink::TableReader reader_{socket_}; // the one reader of the table, with the last read
	NftablesMonitor *quietMonitor_ = nullptr;
	KernelLimits limits_;
	bool simulateNoFullyRandom_ = false;
	std::optional<Feature> refusedFeature_; // of the last commit, when one was
	// The last value read of every counter name seen since the start, carried into a
	// table someone deleted, or a counter a config change brings back (so that no count
	// goes down).
	std::vector<CounterValue> rememberedCounters_;
	// The last commit was refused because another process owns the table: each retry
	// asks whether it still does before encoding anything.
	bool lockedOut_ = false;
};

} // namespace ipmasq
