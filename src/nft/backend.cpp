// SPDX-License-Identifier: Apache-2.0
// The netlink backend: transactions on the agent's table and its verification.
#include "ip-masq-agent/nft/backend.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netlink.h>

#include <fmt/format.h>
#include <libnftnl/udata.h>

#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/nft/table_batch.h"
#include "ip-masq-agent/netlink/change_watch.h"
#include "ip-masq-agent/netlink/monitor.h"
#include "ip-masq-agent/nft/objects.h"
#include "ip-masq-agent/netlink/port_owner.h"
#include "ip-masq-agent/netlink/refusal.h"
#include "ip-masq-agent/nft/replacement.h"
#include "ip-masq-agent/nft/snapshot.h"
#include "ip-masq-agent/nft/codec/decoder.h"
#include "ip-masq-agent/nft/codec/table_reader.h"

namespace ipmasq {

using namespace netlink;

namespace {

std::string setComment(const nftnl_set *set)
{
	uint32_t len = 0;
	const void *data = nftnl_set_get_data(set, NFTNL_SET_USERDATA, &len);
	return userdataComment(data, len, NFTNL_UDATA_SET_COMMENT);
}

// A rule's source NAT target and comment, when the rule is a "snat ip|ip6 to ..." with
// constant addresses (as the agent writes it): decoded as every rule the agent reads
// (codec/decoder.h); nullopt otherwise.
std::optional<KernelSnatRule> snatRuleOf(const nftnl_rule *rule)
{
	static const nft::Table kNoSets{nft::TableFamily::inet, {}, {}, {}};
	const nft::Rule decoded =
		nft::decodeRule(kNoSets, 0, nft::decodeRuleExpressions(rule, nft::kMaxExpressionsPerRule + 1));
	for (const nft::Statement &statement : decoded.statements) {
		const auto *nat = std::get_if<nft::NatStatement>(&statement);
		if (!nat || nat->kind != nft::NatKind::snat || !nat->family || !nat->addressMin)
			continue;
		const auto first = nft::constantOf(decoded, *nat->addressMin);
		const auto last = nft::constantOf(decoded, *nat->addressMax);
		const size_t len = familyBits(*nat->family) / 8;
		if (!first || !last || first->size() != len || last->size() != len)
			return std::nullopt;
		return KernelSnatRule{*nat->family,
				      {Address::fromBytes(*nat->family, first->data()),
				       Address::fromBytes(*nat->family, last->data())},
				      nft::ruleComment(rule)};
	}
	return std::nullopt;
}

// The kind of keys of a named interval set of the kinds AddressSet models: addresses of a
// family, or interface names (held as Family::ipv6's 128-bit width); nullopt for any
// other set.
struct SetKeys {
	Family family;
	bool interfaceNames;
};

std::optional<SetKeys> addressSetKeys(const nftnl_set *set)
{
	const uint32_t flags = nftnl_set_get_u32(set, NFTNL_SET_FLAGS);
	if ((flags & NFT_SET_INTERVAL) == 0 || (flags & NFT_SET_ANONYMOUS) != 0)
		return std::nullopt;
	const uint32_t type = nftnl_set_get_u32(set, NFTNL_SET_KEY_TYPE);
	const uint32_t keyLen = nftnl_set_get_u32(set, NFTNL_SET_KEY_LEN);
	if (type == kTypeIpv4Address && keyLen == 4)
		return SetKeys{Family::ipv4, false};
	if (type == kTypeIpv6Address && keyLen == 16)
		return SetKeys{Family::ipv6, false};
	if (type == kTypeInterfaceName && keyLen == 16)
		return SetKeys{Family::ipv6, true};
	return std::nullopt;
}

// How often a replacement that keeps the counters is read, planned and sent again when
// other commits came in between, before the whole table is replaced instead.
constexpr int kKeepingCountersAttempts = 3;

// How often check() reads a table again when commits to it (or lost notifications) spoiled
// the read, before it answers "unsettled" (the caller then re-applies or looks again later).
constexpr int kSnapshotAttempts = 3;
// How long check() waits for the notifications of the commits made while it read: the
// kernel sends them as it commits, so this only ends a wait for a kernel that is stuck.
constexpr std::chrono::milliseconds kNotificationWait{1000};

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

// The first differing line is usually all it takes to see what drifted.
void logFirstDifference(const std::string &table, const std::string &desired,
			const std::string &actual)
{
	size_t i = 0;
	while (i < actual.size() && i < desired.size() && actual[i] == desired[i])
		i++;
	const size_t lineStart = i == 0 ? std::string::npos : desired.rfind('\n', i - 1);
	const size_t from = lineStart == std::string::npos ? 0 : lineStart + 1;
	const auto line = [from](const std::string &text) {
		return text.substr(from, text.find('\n', from) - from);
	};
	log::debug("table inet {} differs from the desired one; desired: \"{}\", kernel: \"{}\"",
		   table, line(desired), line(actual));
}


// One element of an interval set as the kernel dumps it: a key and whether it ends a
// range (see intervalElements() in objects.cpp for the encoding nft and we send).
struct IntervalBoundary {
	AddressValue value;
	bool end;
};

struct BoundaryCollector {
	unsigned keyLen;
	std::vector<IntervalBoundary> boundaries;
	bool malformed = false;
};

// A C callback (nftnl_set_elem_foreach): nothing may be thrown through it.
int collectBoundary(nftnl_set_elem *elem, void *data)
{
	auto *collector = static_cast<BoundaryCollector *>(data);
	uint32_t len = 0;
	const auto *key = static_cast<const uint8_t *>(nftnl_set_elem_get(elem, NFTNL_SET_ELEM_KEY, &len));
	if (key == nullptr || len != collector->keyLen) {
		collector->malformed = true;
		return 0;
	}
	AddressValue value = 0;
	for (uint32_t i = 0; i < len; i++)
		value = (value << 8) | key[i];
	const uint32_t flags = nftnl_set_elem_is_set(elem, NFTNL_SET_ELEM_FLAGS)
		? nftnl_set_elem_get_u32(elem, NFTNL_SET_ELEM_FLAGS)
		: 0;
	try {
		collector->boundaries.push_back({value, (flags & NFT_SET_ELEM_INTERVAL_END) != 0});
	} catch (...) {
		return -1;
	}
	return 0;
}

// The ranges an interval set's boundaries describe: each start element opens a range,
// the next end element (the first address after it) closes it; a range left open runs
// to the top address. Anything else (two starts in a row) is not what nft writes.
Result<IntervalSet> rangesFromBoundaries(Family family, std::vector<IntervalBoundary> boundaries,
					 const std::string &setName)
{
	std::sort(boundaries.begin(), boundaries.end(), [](const auto &a, const auto &b) {
		return a.value != b.value ? a.value < b.value : a.end > b.end; // ends first
	});
	std::vector<AddressRange> ranges;
	// A plain flag and value: g++ 12 warns (wrongly) on an optional<__int128> here.
	bool open = false;
	AddressValue start = 0;
	for (const IntervalBoundary &boundary : boundaries) {
		if (!boundary.end) {
			if (open)
				return fail(fmt::format("set {} has two range starts in a row",
							setName), EPROTO);
			open = true;
			start = boundary.value;
		} else if (open) {
			ranges.push_back({Address{family, start}, Address{family, boundary.value - 1}});
			open = false;
		}
	}
	if (open)
		ranges.push_back({Address{family, start}, Address::max(family)});
	return IntervalSet::fromRanges(family, std::move(ranges));
}

// One dump of the objects of one kind (chains, sets, objects or rules) of inet `table`, with the
// libnftnl functions of that kind, appended to `out` in the kernel's order. The kernel
// filters set and rule dumps by the table attribute but dumps the chains of every table
// of the family, so only the table's own objects are kept.
template<typename Ptr, typename SetStr, typename Build, typename Parse, typename GetStr>
Status dumpTableObjects(Socket &socket, uint8_t message, const std::string &table,
			const char *what, Ptr (*make)(), SetStr setStr, uint16_t tableAttr,
			Build build, Parse parse, GetStr getStr, std::vector<Ptr> &out)
{
	Ptr filter = make();
	setStr(filter.get(), tableAttr, table.c_str());
	return socket.query(
		message, NFPROTO_INET, NLM_F_DUMP,
		[&](nlmsghdr *nlh) { build(nlh, filter.get()); },
		[&](const nlmsghdr *nlh) -> Status {
			Ptr object = make();
			if (auto p = parsed(parse(nlh, object.get()), what); !p)
				return p;
			const char *owner = getStr(object.get(), tableAttr);
			if (owner && table == owner)
				out.push_back(std::move(object));
			return {};
		});
}

// GETTABLE of one inet table: the kernel's answer, parsed (ENOENT when there is none).
Result<TablePtr> getTable(Socket &socket, const std::string &table)
{
	TablePtr request = tableHandle(table, false);
	TablePtr reply;
	const Status found = socket.query(
		NFT_MSG_GETTABLE, NFPROTO_INET, 0,
		[&](nlmsghdr *nlh) { nftnl_table_nlmsg_build_payload(nlh, request.get()); },
		[&](const nlmsghdr *nlh) {
			reply = newTable();
			return parsed(nftnl_table_nlmsg_parse(nlh, reply.get()), "table");
		});
	if (!found)
		return fail(found.error());
	if (!reply)
		return fail("the kernel sent no table", EPROTO);
	return reply;
}

// dumpTableObjects for each kind the backend reads: chains, sets, objects (counters), rules.
Status dumpChains(Socket &socket, const std::string &table, std::vector<ChainPtr> &out)
{
	return dumpTableObjects(socket, NFT_MSG_GETCHAIN, table, "chain", newChain,
				nftnl_chain_set_str, NFTNL_CHAIN_TABLE, nftnl_chain_nlmsg_build_payload,
				nftnl_chain_nlmsg_parse, nftnl_chain_get_str, out);
}

Status dumpSets(Socket &socket, const std::string &table, std::vector<SetPtr> &out)
{
	return dumpTableObjects(socket, NFT_MSG_GETSET, table, "set", newSet, nftnl_set_set_str,
				NFTNL_SET_TABLE, nftnl_set_nlmsg_build_payload, nftnl_set_nlmsg_parse,
				nftnl_set_get_str, out);
}

Status dumpObjects(Socket &socket, const std::string &table, std::vector<ObjPtr> &out)
{
	return dumpTableObjects(socket, NFT_MSG_GETOBJ, table, "object", newObj, nftnl_obj_set_str,
				NFTNL_OBJ_TABLE, nftnl_obj_nlmsg_build_payload, nftnl_obj_nlmsg_parse,
				nftnl_obj_get_str, out);
}

Status dumpRules(Socket &socket, const std::string &table, std::vector<RulePtr> &out)
{
	return dumpTableObjects(socket, NFT_MSG_GETRULE, table, "rule", newRule, nftnl_rule_set_str,
				NFTNL_RULE_TABLE, nftnl_rule_nlmsg_build_payload, nftnl_rule_nlmsg_parse,
				nftnl_rule_get_str, out);
}

Status dumpFlowtables(Socket &socket, const std::string &table, std::vector<FlowtablePtr> &out)
{
	return dumpTableObjects(socket, NFT_MSG_GETFLOWTABLE, table, "flowtable", newFlowtable,
				nftnl_flowtable_set_str, NFTNL_FLOWTABLE_TABLE,
				nftnl_flowtable_nlmsg_build_payload, nftnl_flowtable_nlmsg_parse,
				nftnl_flowtable_get_str, out);
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

Result<uint32_t> NetlinkBackend::replaceTable(const Ruleset &ruleset, bool createOnly)
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
	if (createOnly) {
		// Nothing to carry but what the agent last saw (a table deleted by hand).
		startCountersAt(*encoded, rememberedCounters_);
		auto batch = createTableBatch(*encoded, socket_.sequence());
		if (!batch)
			return fail(batch.error());
		return commitReplacement(ruleset, *batch, carriers);
	}
	if (auto kept = replaceKeepingCounters(ruleset, *encoded, carriers))
		return std::move(*kept);
	// The table deletes and creates its counters: they start from the values read just
	// before the batch is built, and what is counted until the commit is lost.
	log::debug("table inet {}: replaced whole, its counters created again from the values "
		   "just read", ruleset.table);
	startCountersAt(*encoded, carriedCounters(ruleset.table));
	auto whole = replaceTableBatch(*encoded, socket_.sequence());
	if (!whole)
		return fail(whole.error());
	return commitReplacement(ruleset, *whole, carriers);
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
	// Read, plan and commit, guarded by the generation read: a commit by anyone in
	// between refuses the batch, and the next attempt reads again. When the plan is
	// the same (the commits were other tables'), the batch built for it is sent again
	// with the new generation: then the race window is the read alone, not the build.
	std::optional<ReplacementPlan> sent;
	std::optional<Batch> batch;
	for (int attempt = 0; attempt < kKeepingCountersAttempts; attempt++) {
		auto contents = readTableContents(ruleset.table);
		if (!contents) {
			if (contents.error().errnum == EINTR) // a dump interrupted by another commit
				continue;
			return Result<uint32_t>(fail(contents.error()));
		}
		if (!*contents)
			break; // deleted meanwhile: the whole replacement below creates it
		rememberCounters(**contents);
		std::optional<ReplacementPlan> plan =
			planReplacement(**contents, ruleset, rememberedCounters_, dynamicSetsOf(encoded));
		if (!plan)
			break; // another comment or flags: only deleting the table will do
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
		auto committed = commitReplacement(ruleset, *batch, carriers);
		if (committed || committed.error().errnum != ERESTART)
			return committed;
		log::debug("table inet {}: a commit by someone else since it was read (generation {}); "
			   "reading it again", ruleset.table, sent->generation);
	}
	return std::nullopt;
}

Result<uint32_t> NetlinkBackend::commitReplacement(const Ruleset &ruleset, const Batch &batch,
						   const std::vector<FeatureCarrier> &carriers)
{
	auto answer = transactQuietly(batch);
	if (!answer)
		return fail(answer.error());
	if (!answer->failures.empty()) {
		const BatchAnswer::Failure &first = answer->failures.front();
		if (first.error == ERESTART)
			return fail(fmt::format("table inet {} changed since it was read: the kernel "
						"refused the replacement ({})", ruleset.table,
						std::strerror(ERESTART)),
				    ERESTART);
		refusedFeature_ = refusedFeature(batch, carriers, first.seq, first.error);
		if (first.error == EPERM)
			if (auto held = refusedByOwner(ruleset.table); held)
				return fail(*held);
		return fail(batchError(batch, *answer));
	}
	log::debug("applied table inet {}: {} messages, {} bytes", ruleset.table,
		   batch.acknowledgedMessages(), batch.bytes());
	if (answer->generation)
		return *answer->generation;
	// A kernel that does not echo the commit's generation: ask. Someone else may have
	// committed in between, which only makes the caller check once more.
	return generation();
}

Result<BatchAnswer> NetlinkBackend::transactQuietly(const Batch &batch)
{
	if (!quietMonitor_)
		return transact(batch);
	(void)quietMonitor_->pause(); // best effort: listening only costs time
	// Resumed however transact() ends, an exception (out of memory) included: a monitor
	// left out of its group would never report a change again.
	struct Resume {
		NftablesMonitor *monitor;
		~Resume()
		{
			if (auto resumed = monitor->resume(); !resumed)
				log::warning("{}; nf_tables' change monitor is closed and opened again",
					     resumed.error().message);
		}
	} resume{quietMonitor_};
	return transact(batch);
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
	auto answer = transactQuietly(*batch);
	if (!answer)
		return fail(answer.error());
	if (!answer->failures.empty()) {
		if (answer->failures.front().error == EPERM)
			if (auto held = refusedByOwner(table); held)
				return fail(*held);
		if (answer->failures.front().error == ERESTART)
			return fail(fmt::format("the element update of table inet {} was computed at "
						"ruleset generation {}, and someone committed since: "
						"the kernel refused it ({})", table, generation,
						std::strerror(ERESTART)),
				    ERESTART);
		return fail(batchError(*batch, *answer));
	}
	log::debug("updated the elements of table inet {}: {} ranges, {} messages, {} bytes",
		   table, diff.changedRanges(), batch->acknowledgedMessages(), batch->bytes());
	if (answer->generation)
		return *answer->generation;
	return this->generation();
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
	// Subscribed before the first generation is read: every commit after it is seen.
	auto watch = ChangeWatch::open();
	if (!watch)
		return fail(withPermissionHint(watch.error()));
	// A missing table (deleted by hand) differs from any ruleset: say so without encoding
	// the ruleset. For 100,000 ranges that takes tens of MB, which a restore under a tight
	// memory limit then needs for the commit itself.
	auto exists = tableExists(ruleset.table);
	if (!exists)
		return fail(exists.error());
	if (!*exists)
		return CheckedTable{TableCheck::different, std::nullopt};
	auto encoded = encodeForKernel(ruleset);
	if (!encoded)
		return fail(encoded.error());
	const std::string desired = canonicalForm(*encoded);
	// The table is read with several dumps; a commit in between could make a mix of two
	// versions. When the generation moved, the notifications say whether any of those
	// commits touched the table: only then, or when they were lost, is it read again.
	for (int attempt = 0; attempt < kSnapshotAttempts; attempt++) {
		watch->forget(NFPROTO_INET, ruleset.table);
		const uint64_t blindAt = watch->blind();
		auto before = generation();
		if (!before)
			return fail(before.error());
		auto result = matchesOnce(desired, ruleset.table);
		// EINTR: a dump interrupted; ENOENT: a set or the table gone between two dumps.
		const bool interrupted =
			!result && (result.error().errnum == EINTR || result.error().errnum == ENOENT);
		if (!result && !interrupted)
			return fail(result.error());
		auto after = generation();
		if (!after)
			return fail(after.error());
		if (interrupted)
			continue;
		if (*after == *before)
			return CheckedTable{*result ? TableCheck::same : TableCheck::different, *after};
		auto seen = watch->reached(*after, kNotificationWait);
		if (!seen)
			return fail(seen.error());
		if (*seen && !watch->changed(NFPROTO_INET, ruleset.table, blindAt)) {
			log::debug("table inet {} read at generation {}: the commits since generation {} "
				   "were other tables'", ruleset.table, *after, *before);
			return CheckedTable{*result ? TableCheck::same : TableCheck::different, *after};
		}
	}
	log::debug("table inet {} could not be read consistently: commits to it interrupted "
		   "{} reads in a row", ruleset.table, kSnapshotAttempts);
	return CheckedTable{TableCheck::unsettled, std::nullopt};
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

Status NetlinkBackend::dumpSetElements(const std::string &table, const std::string &set,
				       const std::function<Status(const nftnl_set *)> &onPart)
{
	SetPtr filter = newSet();
	nftnl_set_set_str(filter.get(), NFTNL_SET_TABLE, table.c_str());
	nftnl_set_set_str(filter.get(), NFTNL_SET_NAME, set.c_str());
	return socket_.query(
		NFT_MSG_GETSETELEM, NFPROTO_INET, NLM_F_DUMP,
		[&](nlmsghdr *nlh) { nftnl_set_elems_nlmsg_build_payload(nlh, filter.get()); },
		[&](const nlmsghdr *nlh) -> Status {
			// Each message's elements are handed on at once: the libnftnl objects
			// of a whole 100,000-range set would take 60 MB.
			SetPtr part = newSet();
			if (auto p = parsed(nftnl_set_elems_nlmsg_parse(nlh, part.get()), "set element");
			    !p)
				return p;
			return onPart(part.get());
		});
}

Result<bool> NetlinkBackend::matchesOnce(const std::string &desired, const std::string &table)
{
	const auto context = [&table](const std::string &what) {
		return fmt::format("reading the {} of table inet {}: ", what, table);
	};
	TableSnapshot snapshot;
	auto found = getTable(socket_, table);
	if (!found) {
		if (found.error().errnum == ENOENT)
			return false;
		return fail(withPermissionHint(found.error().withContext(context("table"))));
	}
	snapshot.table = std::move(*found);

	// The kernel counts its place in a chain or object dump among every inet table's
	// objects, so a commit to another table could make one skip or repeat an object of ours:
	// those fail when interrupted (EINTR: read again). Sets, their elements and rules are
	// counted among this table's own, so only a change to it can spoil them, which check()
	// learns from the notifications.
	struct Tolerance {
		Socket &socket;
		~Tolerance() { socket.tolerateInterruptedDumps(false); }
	} strictAfterwards{socket_};
	socket_.tolerateInterruptedDumps(false);
	if (auto s = dumpChains(socket_, table, snapshot.chains); !s)
		return fail(s.error().withContext(context("chains")));
	if (auto s = dumpObjects(socket_, table, snapshot.objects); !s)
		return fail(s.error().withContext(context("counters")));
	socket_.tolerateInterruptedDumps(true);
	if (auto s = dumpSets(socket_, table, snapshot.sets); !s)
		return fail(s.error().withContext(context("sets")));

	for (const SetPtr &set : snapshot.sets) {
		if (isDynamicSet(set.get()))
			continue; // traffic's, not compared (canonicalForm): not read either
		const std::string name = nftnl_set_get_str(set.get(), NFTNL_SET_NAME);
		std::vector<std::string> &lines = snapshot.elements[name];
		Status s = dumpSetElements(table, name, [&lines](const nftnl_set *part) -> Status {
			appendElementLines(part, lines);
			return {};
		});
		if (!s)
			return fail(s.error().withContext(context("elements of set " + name)));
	}

	if (auto s = dumpRules(socket_, table, snapshot.rules); !s)
		return fail(s.error().withContext(context("rules")));

	const std::string actual = canonicalForm(snapshot);
	if (actual == desired)
		return true;
	if (log::debugEnabled())
		logFirstDifference(table, desired, actual);
	return false;
}

Result<std::vector<CounterValue>> NetlinkBackend::readCounters(const std::string &table)
{
	std::vector<ObjPtr> objects;
	const Status read = dumpObjects(socket_, table, objects);
	if (!read) {
		if (read.error().errnum == ENOENT)
			return std::vector<CounterValue>();
		return fail(withPermissionHint(read.error().withContext(
			fmt::format("reading the counters of table inet {}: ", table))));
	}
	std::vector<CounterValue> values;
	for (const ObjPtr &object : objects) {
		nftnl_obj *obj = object.get();
		const char *name = nftnl_obj_get_str(obj, NFTNL_OBJ_NAME);
		if (!name || nftnl_obj_get_u32(obj, NFTNL_OBJ_TYPE) != NFT_OBJECT_COUNTER)
			continue;
		values.push_back(CounterValue{name, nftnl_obj_get_u64(obj, NFTNL_OBJ_CTR_PKTS),
					      nftnl_obj_get_u64(obj, NFTNL_OBJ_CTR_BYTES)});
	}
	remember(values);
	return values;
}

std::vector<CounterValue> NetlinkBackend::carriedCounters(const std::string &table)
{
	// A table that exists has its own counts (readCounters remembers them); a missing
	// one, or one that cannot be read, restarts from the last seen.
	(void)readCounters(table); // a failure leaves what was remembered
	return rememberedCounters_;
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

void NetlinkBackend::rememberCounters(const TableContents &contents)
{
	std::vector<CounterValue> values;
	for (const TableContents::Object &object : contents.objects)
		if (object.type == NFT_OBJECT_COUNTER)
			values.push_back(CounterValue{object.name, object.packets, object.bytes});
	remember(values);
}

namespace {

// A named object of the table as a replacement plans with it: a counter with its values.
TableContents::Object objectOf(nftnl_obj *obj)
{
	TableContents::Object read;
	read.name = stringOf(nftnl_obj_get_str(obj, NFTNL_OBJ_NAME));
	read.type = nftnl_obj_get_u32(obj, NFTNL_OBJ_TYPE);
	uint32_t len = 0;
	const void *data = nftnl_obj_get_data(obj, NFTNL_OBJ_USERDATA, &len);
	read.comment = userdataComment(data, len, NFTNL_UDATA_OBJ_COMMENT);
	if (read.type == NFT_OBJECT_COUNTER) {
		read.packets = nftnl_obj_get_u64(obj, NFTNL_OBJ_CTR_PKTS);
		read.bytes = nftnl_obj_get_u64(obj, NFTNL_OBJ_CTR_BYTES);
	}
	return read;
}

// The names of the table's chains (a rule's anonymous ones go with the rule), sets (not
// anonymous ones), objects and flowtables, into `contents`.
Status readTableObjects(Socket &socket, const std::string &table, TableContents &contents)
{
	const auto context = [&table](const std::string &what) {
		return fmt::format("reading the {} of table inet {}: ", what, table);
	};
	std::vector<ChainPtr> chains;
	if (auto s = dumpChains(socket, table, chains); !s)
		return fail(s.error().withContext(context("chains")));
	for (const ChainPtr &chain : chains) {
		const uint32_t flags = nftnl_chain_is_set(chain.get(), NFTNL_CHAIN_FLAGS)
			? nftnl_chain_get_u32(chain.get(), NFTNL_CHAIN_FLAGS)
			: 0;
		if (!(flags & NFT_CHAIN_BINDING)) // a rule's anonymous chain goes with the rule
			contents.chains.push_back(stringOf(nftnl_chain_get_str(chain.get(), NFTNL_CHAIN_NAME)));
	}
	std::vector<SetPtr> sets;
	if (auto s = dumpSets(socket, table, sets); !s)
		return fail(s.error().withContext(context("sets")));
	for (const SetPtr &set : sets)
		if (!(nftnl_set_get_u32(set.get(), NFTNL_SET_FLAGS) & NFT_SET_ANONYMOUS)) {
			contents.sets.push_back(stringOf(nftnl_set_get_str(set.get(), NFTNL_SET_NAME)));
			if (isDynamicSet(set.get()))
				contents.dynamicSets.emplace_back(contents.sets.back(), setDeclaration(set.get()));
		}
	std::vector<ObjPtr> objects;
	if (auto s = dumpObjects(socket, table, objects); !s)
		return fail(s.error().withContext(context("objects")));
	for (const ObjPtr &object : objects)
		contents.objects.push_back(objectOf(object.get()));
	std::vector<FlowtablePtr> flowtables;
	if (auto s = dumpFlowtables(socket, table, flowtables); !s)
		return fail(s.error().withContext(context("flowtables")));
	for (const FlowtablePtr &flowtable : flowtables)
		contents.flowtables.push_back(
			stringOf(nftnl_flowtable_get_str(flowtable.get(), NFTNL_FLOWTABLE_NAME)));
	return {};
}

} // namespace

Result<std::optional<TableContents>> NetlinkBackend::readTableContents(const std::string &table)
{
	const auto context = [&table](const std::string &what) {
		return fmt::format("reading the {} of table inet {}: ", what, table);
	};
	auto gen = generation();
	if (!gen)
		return fail(gen.error());
	TableContents contents;
	contents.generation = *gen;

	const auto found = getTable(socket_, table);
	if (!found) {
		if (found.error().errnum == ENOENT)
			return std::optional<TableContents>();
		return fail(withPermissionHint(found.error().withContext(context("table"))));
	}
	const nftnl_table *reply = found->get();
	if (nftnl_table_is_set(reply, NFTNL_TABLE_FLAGS))
		contents.flags = nftnl_table_get_u32(reply, NFTNL_TABLE_FLAGS);
	uint32_t len = 0;
	const void *data = nftnl_table_get_data(reply, NFTNL_TABLE_USERDATA, &len);
	contents.comment = userdataComment(data, len, NFTNL_UDATA_TABLE_COMMENT);

	if (auto s = readTableObjects(socket_, table, contents); !s)
		return fail(withPermissionHint(s.error()));
	return std::optional(std::move(contents));
}

Result<std::optional<KernelTable>> NetlinkBackend::readTable(const std::string &table)
{
	auto read = readTableOnce(table);
	if (!read)
		return fail(withPermissionHint(
			read.error().withContext(fmt::format("reading table inet {}: ", table))));
	return read;
}

namespace {

// An address set of the table (or one of interface names), as declared.
struct DeclaredSet {
	std::string name;
	SetKeys keys;
	std::string comment;
};

std::vector<DeclaredSet> declaredAddressSets(const std::vector<SetPtr> &sets)
{
	std::vector<DeclaredSet> declared;
	for (const SetPtr &set : sets) {
		const char *name = nftnl_set_get_str(set.get(), NFTNL_SET_NAME);
		if (const auto keys = addressSetKeys(set.get()); name && keys)
			declared.push_back({name, *keys, setComment(set.get())});
	}
	return declared;
}

// The elements collected from `set` as the model's AddressSet, or why they are not one.
Result<AddressSet> addressSetOf(const DeclaredSet &set, BoundaryCollector collector)
{
	const Family family = set.keys.family;
	if (collector.malformed)
		return fail(fmt::format("set {} holds elements that are not {}", set.name,
					set.keys.interfaceNames
						? "interface names"
						: familyName(family) + std::string(" addresses")),
			    EPROTO);
	auto ranges = rangesFromBoundaries(family, std::move(collector.boundaries), set.name);
	if (!ranges)
		return fail(ranges.error());
	return AddressSet{set.name, std::move(*ranges), set.comment, set.keys.interfaceNames};
}

} // namespace

Result<std::optional<KernelTable>> NetlinkBackend::readTableOnce(const std::string &table)
{
	if (auto found = getTable(socket_, table); !found) {
		if (found.error().errnum == ENOENT)
			return std::optional<KernelTable>();
		return fail(found.error());
	}

	// Every address set of the table, whatever its name: a set the agent adds needs no
	// change here. Anonymous sets ({ tcp, udp, sctp }) belong to their rules.
	std::vector<SetPtr> sets;
	Status s = dumpSets(socket_, table, sets);
	if (!s)
		return fail(s.error());
	std::vector<AddressSet> out;
	for (const DeclaredSet &set : declaredAddressSets(sets)) {
		BoundaryCollector collector{familyBits(set.keys.family) / 8, {}};
		s = dumpSetElements(table, set.name, [&collector](const nftnl_set *part) -> Status {
			if (nftnl_set_elem_foreach(const_cast<nftnl_set *>(part), collectBoundary,
						   &collector) < 0)
				return fail("out of memory reading set elements", ENOMEM);
			return {};
		});
		if (!s)
			return fail(s.error().withContext("elements of set " + set.name + ": "));
		auto read = addressSetOf(set, std::move(collector));
		if (!read)
			return fail(read.error());
		out.push_back(std::move(*read));
	}

	std::vector<RulePtr> rules;
	s = dumpRules(socket_, table, rules);
	if (!s)
		return fail(s.error().withContext("rules: "));
	KernelTable read{std::move(out), {}};
	for (const RulePtr &rule : rules) {
		if (auto snat = snatRuleOf(rule.get()))
			read.snatRules.push_back(std::move(*snat));
	}
	return std::optional(std::move(read));
}

} // namespace ipmasq
