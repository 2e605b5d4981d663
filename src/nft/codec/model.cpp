// SPDX-License-Identifier: Apache-2.0
// The node's NAT as data: names, look-ups, and sets held sorted for search.
#include "ip-masq-agent/nft/codec/model.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>

#include "ip-masq-agent/nft/codec/vocabulary.h"

namespace ipmasq::nft {

const char *tableFamilyName(TableFamily family)
{
	switch (family) {
	case TableFamily::ip:
		return "ip";
	case TableFamily::ip6:
		return "ip6";
	case TableFamily::inet:
		return "inet";
	}
	return "?";
}

std::optional<Bytes> constantOf(const Rule &rule, ReadId read)
{
	if (read >= rule.reads.size())
		return std::nullopt;
	const std::span<const Slice> slices = rule.read(read);
	if (slices.size() != 1 || slices[0].kind != Slice::Kind::value)
		return std::nullopt;
	const auto *constant = std::get_if<Constant>(&rule.values.at(slices[0].value).source);
	if (!constant || size_t(slices[0].offset) + slices[0].len > constant->bytes.size())
		return std::nullopt;
	const auto from = constant->bytes.begin() + slices[0].offset;
	return Bytes(from, from + slices[0].len);
}

bool isNatPostrouting(const Chain &chain)
{
	return chain.base && chain.base->type == "nat" && chain.base->hook == NF_INET_POST_ROUTING;
}

const Chain *Table::findChain(const std::string &chainName) const
{
	for (const Chain &chain : chains)
		if (chain.name == chainName)
			return &chain;
	return nullptr;
}

const Set *Table::findSet(const std::string &setName) const
{
	for (const Set &set : sets)
		if (set.name == setName)
			return &set;
	return nullptr;
}

namespace {

int compareKeys(std::span<const uint8_t> a, std::span<const uint8_t> b)
{
	const size_t len = std::min(a.size(), b.size());
	return len == 0 ? 0 : std::memcmp(a.data(), b.data(), len); // data() of an empty span may be null
}

uint32_t indexOf(std::vector<Verdict> &verdicts, const Verdict &verdict)
{
	const auto it = std::find(verdicts.begin(), verdicts.end(), verdict);
	if (it != verdicts.end())
		return static_cast<uint32_t>(it - verdicts.begin());
	verdicts.push_back(verdict);
	return static_cast<uint32_t>(verdicts.size() - 1);
}

// An object map names few objects; a search of more per element would cost too much.
constexpr size_t kMaxObjectNames = 256;

// Reorders `v` (`width` bytes an entry) by `order`.
template<typename T>
void permute(std::vector<T> &v, const std::vector<uint32_t> &order, size_t width)
{
	if (v.empty())
		return;
	std::vector<T> sorted(v.size());
	for (size_t i = 0; i < order.size(); i++)
		std::copy_n(v.begin() + static_cast<long>(order[i] * width), width,
			    sorted.begin() + static_cast<long>(i * width));
	v = std::move(sorted);
}

} // namespace

bool Set::isVerdictMap() const
{
	return dataType == NFT_DATA_VERDICT;
}

void Set::markUnusable(std::string why)
{
	if (unusable_.empty())
		unusable_ = std::move(why);
	// Nothing can be searched or listed: keep no elements (a partial set could only mislead).
	holdsElements_ = false;
	keys_ = {};
	keyEnds_ = {};
	data_ = {};
	intervalEnds_ = {};
	verdictIndex_ = {};
	objectNames_ = {};
	listedAt_ = {};
	hasCatchAll_ = false;
}

void Set::add(const SetElement &e)
{
	if (!holdsElements_)
		return;
	const bool map = (flags & NFT_SET_MAP) && !isVerdictMap();
	if (e.catchAll) {
		hasCatchAll_ = true;
		catchAllData_ = e.data;
		if (e.verdict)
			catchAllVerdict_ = indexOf(verdicts_, *e.verdict);
		return;
	}
	const bool hasData = !e.intervalEnd && map;
	const bool ranges = (flags & NFT_SET_INTERVAL) && (flags & NFT_SET_CONCAT);
	if (e.key.size() != keyLen || e.keyEnd.size() != (ranges ? keyLen : 0) ||
	    (hasData && e.data.size() != dataLen))
		return markUnusable(fmt::format("set {} holds elements of another shape", name));
	if (flags & NFT_SET_OBJECT) { // the name as an index into the few names the map holds
		const std::string object(e.data.begin(), e.data.end());
		auto it = std::find(objectNames_.begin(), objectNames_.end(), object);
		if (it == objectNames_.end() && objectNames_.size() >= kMaxObjectNames)
			return markUnusable(fmt::format("set {} names more than {} objects", name, kMaxObjectNames));
		if (it == objectNames_.end())
			it = objectNames_.insert(it, object);
		const auto index = static_cast<uint32_t>(it - objectNames_.begin());
		data_.insert(data_.end(), reinterpret_cast<const uint8_t *>(&index),
			     reinterpret_cast<const uint8_t *>(&index) + sizeof(index));
	}
	keys_.insert(keys_.end(), e.key.begin(), e.key.end());
	keyEnds_.insert(keyEnds_.end(), e.keyEnd.begin(), e.keyEnd.end());
	intervalEnds_.push_back(e.intervalEnd ? 1 : 0);
	if (hasData)
		data_.insert(data_.end(), e.data.begin(), e.data.end());
	else if (map)
		data_.resize(data_.size() + dataLen, 0);
	if (isVerdictMap())
		verdictIndex_.push_back(e.verdict ? indexOf(verdicts_, *e.verdict)
						  : indexOf(verdicts_, {VerdictCode::breakRule, {}}));
}

void Set::finish()
{
	if (!holdsElements_)
		return;
	if (flags & (NFT_SET_EVAL | NFT_SET_TIMEOUT))
		return markUnusable(fmt::format("set {} changes by itself (dynamic or with timeouts)", name));
	// The text lists them, in the kernel's order as nft does; the evaluator does not search them.
	if ((flags & NFT_SET_INTERVAL) && (flags & NFT_SET_CONCAT)) {
		unusable_ = fmt::format("set {} holds concatenated ranges", name);
		return;
	}
	// By key; an end before a start at the same key: a range that starts where another
	// ends wins, as in the kernel's interval tree.
	std::vector<uint32_t> order(size());
	std::iota(order.begin(), order.end(), 0);
	std::stable_sort(order.begin(), order.end(), [this](uint32_t a, uint32_t b) {
		const int d = compareKeys(key(a), key(b));
		return d != 0 ? d < 0 : (intervalEnds_[a] && !intervalEnds_[b]);
	});
	permute(keys_, order, keyLen);
	permute(keyEnds_, order, keyLen);
	permute(data_, order, (flags & NFT_SET_OBJECT) ? sizeof(uint32_t) : dataLen);
	permute(intervalEnds_, order, 1);
	permute(verdictIndex_, order, 1);
	if (const auto type = typeOfId(keyType); type && typeInfo(*type).base == Type::bitmask) {
		listedAt_.resize(order.size());
		for (size_t sorted = 0; sorted < order.size(); sorted++)
			listedAt_[order[sorted]] = static_cast<uint32_t>(sorted);
	}
	keys_.shrink_to_fit();
	keyEnds_.shrink_to_fit();
	data_.shrink_to_fit();
}

const Verdict *Set::verdict(size_t i) const
{
	return i < verdictIndex_.size() ? &verdicts_[verdictIndex_[i]] : nullptr;
}

std::string_view Set::objectName(size_t i) const
{
	if (i == kCatchAll)
		return {reinterpret_cast<const char *>(catchAllData_.data()), catchAllData_.size()};
	uint32_t index = 0;
	if ((i + 1) * sizeof(index) > data_.size())
		return {};
	std::memcpy(&index, data_.data() + i * sizeof(index), sizeof(index));
	return index < objectNames_.size() ? std::string_view(objectNames_[index]) : std::string_view();
}

const Verdict *Set::catchAllVerdict() const
{
	return catchAllVerdict_ ? &verdicts_[*catchAllVerdict_] : nullptr;
}

std::optional<size_t> Set::find(std::span<const uint8_t> k) const
{
	// The first element whose key is greater than k.
	// (A loop, not std::ranges::partition_point over an iota_view: clang 14, which builds
	// the fuzz targets, cannot use libstdc++ 12's ranges.)
	size_t low = 0, high = size();
	while (low < high) {
		const size_t mid = low + (high - low) / 2;
		if (compareKeys(k, key(mid)) < 0)
			high = mid;
		else
			low = mid + 1;
	}
	if (low > 0) {
		const size_t before = low - 1;
		if ((flags & NFT_SET_INTERVAL) ? !intervalEnd(before) : compareKeys(key(before), k) == 0)
			return before;
	}
	if (hasCatchAll_)
		return kCatchAll;
	return std::nullopt;
}

size_t Set::bytes() const
{
	size_t total = keys_.capacity() + keyEnds_.capacity() + data_.capacity() + intervalEnds_.capacity() +
		       4 * verdictIndex_.capacity() + 4 * listedAt_.capacity();
	for (const Verdict &v : verdicts_)
		total += sizeof(Verdict) + v.chain.capacity();
	for (const std::string &object : objectNames_)
		total += sizeof(object) + object.capacity();
	return total + sizeof(Set);
}

} // namespace ipmasq::nft
