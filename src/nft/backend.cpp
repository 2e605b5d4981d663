// SPDX-License-Identifier: Apache-2.0
// The netlink backend: transactions on the agent's table and its verification.
#include "ip-masq-agent/nft/backend.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>

#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/netlink/monitor.h"
#include "ip-masq-agent/netlink/nftnl_parse.h"
#include "ip-masq-agent/netlink/port_owner.h"
#include "ip-masq-agent/netlink/refusal.h"
#include "ip-masq-agent/nft/objects.h"
#include "ip-masq-agent/nft/replacement.h"
#include "ip-masq-agent/nft/set_encoding.h"
#include "ip-masq-agent/nft/snapshot.h"
#include "ip-masq-agent/nft/table_batch.h"

namespace ipmasq {

using namespace netlink;

namespace {

// How often a replacement that keeps the counters is read, planned and sent again when
// other commits came in between, before the whole table is replaced instead.
constexpr int kKeepingCountersAttempts = 3;

// EPERM and EACCES say what refused: a missing capability, or something else (refusal.h).
Error withPermissionHint(Error error)
{
	return explainRefusal(std::move(error));
}

// "<object>: <strerror>[ (<kernel's text>)]" for the first failure of a batch, which is
// the cause; later ones are often just consequences (rules of a chain that failed).
Error batchError(const Batch &batch, const BatchAnswer &answer)
{
	const BatchAnswer::Failure &first = answer.failures.front();
	std::string object = batch.describe(first.seq);
	if (object.empty())
		object = "transaction";
	std::string message = fmt::format("{}: {}", object, std::strerror(first.error));
	if (!first.detail.empty())
		message += fmt::format(" ({})", first.detail);
	for (size_t i = 1; i < answer.failures.size(); i++)
		log::debug("nf_tables also refused {}: {}", batch.describe(answer.failures[i].seq),
			   std::strerror(answer.failures[i].error));
	return withPermissionHint(Error(message, first.error));
}

// "netlink port 1234, pid 567 \"nft\"", as far as this namespace lets us see.
std::string describeOwner(std::optional<uint32_t> portId)
{
	if (!portId)
		return "the kernel does not say which";
	const auto owner = findPortOwner(*portId);
	if (!owner)
		return fmt::format("netlink port {}; its process cannot be looked up: {}", *portId,
				   owner.error().message);
	if (!*owner)
		return fmt::format("netlink port {}; its process is not visible from here", *portId);
	return fmt::format("netlink port {}, pid {} {}", *portId, (*owner)->pid, quoted((*owner)->command));
}

// What a replacement's commit says (NetlinkBackend::commit): refused as stale, or done.
std::pair<std::string, std::string> replacementWords(const std::string &table)
{
	return {fmt::format("table inet {} changed since it was read: the kernel refused the "
			    "replacement", table),
		fmt::format("applied table inet {}", table)};
}

} // namespace

NetlinkBackend::NetlinkBackend(Socket socket) : socket_(std::move(socket)) {}

Result<std::unique_ptr<NetlinkBackend>> NetlinkBackend::open()
{
	auto socket = Socket::open();
	if (!socket)
		return fail(socket.error());
	std::unique_ptr<NetlinkBackend> backend(new NetlinkBackend(std::move(*socket)));
	// nfnetlink refuses everything, reads included, without CAP_NET_ADMIN.
	if (auto gen = backend->generation(); !gen)
		return fail(gen.error().withContext("cannot talk to nf_tables: "));
	return backend;
}

Result<BatchAnswer> NetlinkBackend::transact(const Batch &batch)
{
	auto answer = socket_.sendBatch(batch);
	if (!answer)
		return fail(withPermissionHint(answer.error()));
	return answer;
}

Result<BatchAnswer> NetlinkBackend::transactQuietly(const Batch &batch)
{
	if (!quietMonitor_)
		return transact(batch);
	try {
		(void)quietMonitor_->pause(); // best effort: listening only costs time
		auto answer = transact(batch);
		if (auto resumed = quietMonitor_->resume(); !resumed)
			log::warning("{}; nf_tables' change monitor is closed and opened again",
				     resumed.error().message);
		return answer;
	} catch (...) {
		// Out of memory (GuardedBackend makes it an error). A monitor left out of its
		// group would never report a change again, and joining it again, or saying why
		// that failed, may need memory there is none of: closed, which allocates nothing,
		// it is opened again as after a read error.
		quietMonitor_->close();
		throw;
	}
}

Result<uint32_t> NetlinkBackend::commit(const std::string &table, const Batch &batch,
					const std::vector<FeatureCarrier> &carriers, const std::string &stale,
					const std::string &done)
{
	auto answer = transactQuietly(batch);
	if (!answer)
		return fail(answer.error());
	if (!answer->failures.empty()) {
		const BatchAnswer::Failure &first = answer->failures.front();
		if (first.error == ERESTART)
			return fail(fmt::format("{} ({})", stale, std::strerror(ERESTART)), ERESTART);
		refusedFeature_ = refusedFeature(batch, carriers, first.seq, first.error);
		if (first.error == EPERM)
			if (auto held = refusedByOwner(table); held)
				return fail(*held);
		return fail(batchError(batch, *answer));
	}
	reader_.forget(); // the commit made a new generation: the last read is of no more use
	log::debug("{}: {} messages, {} bytes", done, batch.acknowledgedMessages(), batch.bytes());
	if (answer->generation)
		return *answer->generation;
	// A kernel that does not echo the commit's generation: ask. Someone else may have
	// committed in between, which only makes the caller check once more.
	return generation();
}

Result<uint32_t> NetlinkBackend::commitTable(const Ruleset &ruleset)
{
	// Locked out by the table's owner: ask whether it still is before encoding a table
	// that may hold 100,000 ranges, which the retries would otherwise do every time.
	if (lockedOut_)
		if (auto held = refusedByOwner(ruleset.table); held)
			return fail(*held);
	auto encoded = encodeForKernel(ruleset);
	if (!encoded)
		return fail(encoded.error());
	const std::vector<FeatureCarrier> carriers = featureCarriers(ruleset, *encoded);
	if (auto kept = replaceKeepingCounters(ruleset, *encoded, carriers))
		return std::move(*kept);
	// The table deletes and creates its counters: they start from the values read just
	// before the batch is built, and what is counted until the commit is lost.
	log::debug("table inet {}: replaced whole, its counters created again from the values "
		   "just read", ruleset.table);
	if (auto now = readCounters(ruleset.table); !now)
		log::debug("{}; its counters start from the last values seen", now.error().message);
	startCountersAt(*encoded, rememberedCounters_);
	auto whole = replaceTableBatch(*encoded, socket_.sequence());
	if (!whole)
		return fail(whole.error());
	const auto [stale, done] = replacementWords(ruleset.table);
	return commit(ruleset.table, *whole, carriers, stale, done);
}

namespace {

// The desired dynamic sets as a replacement plans with them: name and declaration.
std::vector<std::pair<std::string, std::string>> dynamicSetsOf(const EncodedTable &encoded)
{
	std::vector<std::pair<std::string, std::string>> out;
	for (const EncodedSet &set : encoded.sets)
		if (isDynamicSet(set.set.get()))
			out.emplace_back(nftnl_set_get_str(set.set.get(), NFTNL_SET_NAME),
					 setDeclaration(set.set.get()));
	return out;
}

} // namespace

std::optional<Result<uint32_t>> NetlinkBackend::replaceKeepingCounters(
	const Ruleset &ruleset, EncodedTable &encoded, const std::vector<FeatureCarrier> &carriers)
{
	// Read, plan and commit, guarded by the generation of the read: a commit by anyone
	// since refuses the batch, and the next attempt reads again (at the new generation:
	// other tables' commits during the read do not spoil it). When the plan is the same,
	// the batch built for it is sent again with the new generation: then the race window
	// is the end of the read, not the build.
	const auto [stale, done] = replacementWords(ruleset.table);
	std::optional<ReplacementPlan> sent;
	std::optional<Batch> batch;
	for (int attempt = 0; attempt < kKeepingCountersAttempts; attempt++) {
		auto read = reader_.read(ruleset.table, ReadDepth::declarations);
		if (!read)
			return Result<uint32_t>(fail(withPermissionHint(read.error())));
		if (read->unsettled)
			continue; // commits to the table itself kept spoiling the read
		if (!read->snapshot) { // absent: created, with what the agent last saw of its counts
			startCountersAt(encoded, rememberedCounters_);
			auto created = createTableBatch(encoded, socket_.sequence());
			if (!created)
				return Result<uint32_t>(fail(created.error()));
			auto committed = commit(ruleset.table, *created, carriers, stale, done);
			if (committed || refusedFeature_ || committed.error().errnum != EEXIST)
				return committed;
			log::debug("table inet {} was created by someone else meanwhile; replacing it",
				   ruleset.table);
			sent.reset();
			continue;
		}
		TableContents contents = contentsOf(*read->snapshot);
		if (read->reused) { // counters count without commits: a read made before has old values
			auto now = readCounters(ruleset.table);
			if (!now)
				return Result<uint32_t>(fail(withPermissionHint(now.error())));
			contents.setCounterValues(*now);
		}
		remember(contents.counters());
		std::optional<ReplacementPlan> plan =
			planReplacement(contents, ruleset, rememberedCounters_, dynamicSetsOf(encoded));
		if (!plan)
			return std::nullopt; // another comment or flags: only deleting the table will do
		if (batch && sent && sent->sameChanges(*plan)) {
			batch->setGuard(plan->generation);
		} else {
			startCountersAt(encoded, plan->createdCounters);
			auto built = replaceKeepingCountersBatch(encoded, *plan, socket_.sequence());
			if (!built)
				return Result<uint32_t>(fail(built.error()));
			batch = std::move(*built);
		}
		sent = std::move(plan);
		auto committed = commit(ruleset.table, *batch, carriers, stale, done);
		if (committed || committed.error().errnum != ERESTART)
			return committed;
		log::debug("table inet {}: a commit by someone else since it was read (generation {}); "
			   "reading it again", ruleset.table, sent->generation);
	}
	return std::nullopt;
}

std::optional<Error> NetlinkBackend::refusedByOwner(const std::string &table)
{
	std::optional<uint32_t> flags, owner;
	const auto reply = getTable(socket_, table);
	if (reply && nftnl_table_is_set(reply->get(), NFTNL_TABLE_FLAGS))
		flags = nftnl_table_get_u32(reply->get(), NFTNL_TABLE_FLAGS);
	if (reply && nftnl_table_is_set(reply->get(), NFTNL_TABLE_OWNER))
		owner = nftnl_table_get_u32(reply->get(), NFTNL_TABLE_OWNER);
	lockedOut_ = reply && flags && (*flags & NFT_TABLE_F_OWNER) && owner != portId();
	if (!lockedOut_)
		return std::nullopt;
	return Error(fmt::format("table inet {} is held by another process with the flag \"owner\" "
				 "({}): the kernel lets only that process change or delete it; the "
				 "agent tries again every few hundred milliseconds, and restores its "
				 "table as soon as that process exits (the kernel then removes the "
				 "table)", table, describeOwner(owner)),
		     EPERM);
}

Result<uint32_t> NetlinkBackend::updateElements(const std::string &table, const ElementDiff &diff,
						uint32_t generation)
{
	const EncodedElementChanges changes = encodeElementChanges(table, diff);
	auto batch = updateElementsBatch(table, changes, generation, socket_.sequence());
	if (!batch)
		return fail(batch.error());
	return commit(table, *batch, {},
		      fmt::format("the element update of table inet {} was computed at ruleset "
				  "generation {}, and someone committed since: the kernel refused it",
				  table, generation),
		      fmt::format("updated the elements of table inet {}: {} ranges", table,
				  diff.changedRanges()));
}

Status NetlinkBackend::remove(const std::string &table)
{
	auto batch = deleteTableBatch(table, socket_.sequence());
	if (!batch)
		return fail(batch.error());
	auto answer = transact(*batch);
	if (!answer)
		return fail(answer.error());
	if (!answer->failures.empty() && answer->failures.front().error == EPERM)
		if (auto held = refusedByOwner(table); held)
			return fail(*held);
	if (!answer->failures.empty() && answer->failures.front().error != ENOENT)
		return fail(batchError(*batch, *answer));
	return {};
}

Result<uint32_t> NetlinkBackend::generation()
{
	auto generation = rulesetGeneration(socket_);
	if (!generation)
		return fail(withPermissionHint(generation.error()));
	return generation;
}

Result<CheckedTable> NetlinkBackend::check(const Ruleset &ruleset)
{
	// A missing table (deleted by hand) differs from any ruleset: said without encoding the
	// ruleset. For 100,000 ranges that takes tens of MB, which a restore under a tight
	// memory limit then needs for the commit itself.
	auto read = reader_.read(ruleset.table, ReadDepth::whole);
	if (!read)
		return fail(withPermissionHint(read.error()));
	if (read->unsettled)
		return CheckedTable{TableCheck::unsettled, std::nullopt};
	if (!read->snapshot)
		return CheckedTable{TableCheck::different, std::nullopt};
	auto encoded = encodeForKernel(ruleset);
	if (!encoded)
		return fail(encoded.error());
	std::string difference;
	if (sameTable(*encoded, *read->snapshot, difference)) {
		// Nothing to restore, so nothing will plan with this read: a few MB at 100,000
		// ranges not held until the next commit.
		reader_.forget();
		return CheckedTable{TableCheck::same, read->generation};
	}
	log::debug("table inet {} differs from the desired one; {}", ruleset.table, difference);
	return CheckedTable{TableCheck::different, read->generation};
}

Result<bool> NetlinkBackend::matches(const Ruleset &ruleset)
{
	auto checked = check(ruleset);
	if (!checked)
		return fail(checked.error());
	if (checked->verdict == TableCheck::unsettled)
		return fail(fmt::format("table inet {} kept changing while it was being read",
					ruleset.table), EAGAIN);
	return checked->verdict == TableCheck::same;
}

Result<std::optional<KernelTable>> NetlinkBackend::readTable(const std::string &table)
{
	const std::string context = fmt::format("reading table inet {}: ", table);
	auto read = reader_.read(table, ReadDepth::whole);
	if (!read)
		return fail(withPermissionHint(read.error().withContext(context)));
	if (read->unsettled)
		return fail(context + "commits to it kept changing it while it was being read", EAGAIN);
	if (!read->snapshot)
		return std::optional<KernelTable>();
	auto kernel = kernelTableOf(*read->snapshot);
	if (!kernel)
		return fail(kernel.error().withContext(context));
	return std::optional(std::move(*kernel));
}

Result<std::vector<CounterValue>> NetlinkBackend::readCounters(const std::string &table)
{
	auto values = reader_.readCounters(table);
	if (!values)
		return fail(withPermissionHint(values.error()));
	remember(*values);
	return values;
}

void NetlinkBackend::remember(const std::vector<CounterValue> &values)
{
	for (const CounterValue &value : values) {
		const auto known = std::find_if(rememberedCounters_.begin(), rememberedCounters_.end(),
						[&](const CounterValue &v) { return v.name == value.name; });
		if (known == rememberedCounters_.end())
			rememberedCounters_.push_back(value);
		else
			*known = value;
	}
}

} // namespace ipmasq
