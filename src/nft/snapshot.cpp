// SPDX-License-Identifier: Apache-2.0
// The agent's table as read: its comparison with the desired one, and each use's part of it.
#include "ip-masq-agent/nft/snapshot.h"

#include <algorithm>
#include <cerrno>
#include <functional>
#include <map>
#include <optional>
#include <string_view>

#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>
#include <libnftnl/udata.h>

#include "ip-masq-agent/netlink/nftnl_parse.h"
#include "ip-masq-agent/nft/codec/decoder.h"
#include "ip-masq-agent/nft/codec/table_reader.h"

namespace ipmasq::netlink {

namespace {

// Bytes as lowercase hex digits: user data, keys.
std::string hex(const void *data, uint32_t len)
{
	static constexpr char kDigits[] = "0123456789abcdef";
	std::string out(static_cast<size_t>(len) * 2, '\0');
	const auto *bytes = static_cast<const uint8_t *>(data);
	for (uint32_t i = 0; i < len; i++) {
		out[2 * i] = kDigits[bytes[i] >> 4];
		out[2 * i + 1] = kDigits[bytes[i] & 0xf];
	}
	return out;
}

// Names are always present in what we build and what the kernel dumps, but a missing
// one must not crash a comparison.
std::string str(const char *value)
{
	return value ? value : "(none)";
}

// Attributes the kernel leaves out of a dump when they are zero read as zero.
template<typename Object, typename IsSet, typename Get>
uint32_t u32Or0(const Object *object, uint16_t attr, IsSet isSet, Get get)
{
	return isSet(object, attr) ? get(object, attr) : 0;
}

uint32_t setU32(const nftnl_set *set, uint16_t attr)
{
	return u32Or0(set, attr, nftnl_set_is_set, nftnl_set_get_u32);
}

std::string setUserdata(const nftnl_set *set)
{
	uint32_t len = 0;
	const void *data = nftnl_set_get_data(set, NFTNL_SET_USERDATA, &len);
	return data ? hex(data, len) : std::string();
}

// A set's declaration. A named set's elements are compared apart (ElementRecords); an
// anonymous one's are printed after it, where a rule looks it up.
std::string setText(const nftnl_set *set, bool withName)
{
	return fmt::format(
		"set {} flags {:#x} key {}/{} data {}/{} size {} policy {} timeout {} udata {}\n",
		withName ? str(nftnl_set_get_str(set, NFTNL_SET_NAME)) : "(anonymous)",
		setU32(set, NFTNL_SET_FLAGS), setU32(set, NFTNL_SET_KEY_TYPE),
		setU32(set, NFTNL_SET_KEY_LEN), setU32(set, NFTNL_SET_DATA_TYPE),
		setU32(set, NFTNL_SET_DATA_LEN), setU32(set, NFTNL_SET_DESC_SIZE),
		setU32(set, NFTNL_SET_POLICY),
		nftnl_set_is_set(set, NFTNL_SET_TIMEOUT) ? nftnl_set_get_u64(set, NFTNL_SET_TIMEOUT)
							 : 0,
		setUserdata(set));
}

std::string anonymousSetText(const nftnl_set *set, const ElementRecords &elements)
{
	std::string out = setText(set, false);
	for (size_t i = 0; i < elements.size(); i++)
		out += "  " + elements.line(i) + "\n";
	return out;
}

uint32_t exprU32(const nftnl_expr *expr, uint16_t attr)
{
	return u32Or0(expr, attr, nftnl_expr_is_set, nftnl_expr_get_u32);
}

// For a single port nft sends only proto_min; the kernel then uses that register for
// the maximum too and dumps both.
std::string masqText(const nftnl_expr *expr)
{
	const uint32_t min = exprU32(expr, NFTNL_EXPR_MASQ_REG_PROTO_MIN);
	const uint32_t max = nftnl_expr_is_set(expr, NFTNL_EXPR_MASQ_REG_PROTO_MAX)
		? nftnl_expr_get_u32(expr, NFTNL_EXPR_MASQ_REG_PROTO_MAX)
		: min;
	return fmt::format("masq flags {:#x} proto_min reg {} proto_max reg {}",
			   exprU32(expr, NFTNL_EXPR_MASQ_FLAGS), min, max);
}

// The kernel dumps a dynset's timeout 0 (none: the set's own), which nft does not send,
// and which a set without timeouts refuses.
std::string withoutZeroTimeout(const std::string &name, const nftnl_expr *expr, std::string text)
{
	static constexpr std::string_view kZero = "timeout 0ms ";
	if (name != "dynset" || !nftnl_expr_is_set(expr, NFTNL_EXPR_DYNSET_TIMEOUT) ||
	    nftnl_expr_get_u64(expr, NFTNL_EXPR_DYNSET_TIMEOUT) != 0)
		return text;
	if (const size_t at = text.find(kZero); at != std::string::npos)
		text.erase(at, kZero.size());
	return text;
}

// How a lookup names its set: an anonymous one by its contents, a named one by name.
using SetResolver = std::function<std::optional<std::string>(const nftnl_expr *lookup)>;

std::string exprText(const nftnl_expr *expr, const SetResolver &resolveSet)
{
	const std::string name = str(nftnl_expr_get_str(expr, NFTNL_EXPR_NAME));
	if (name == "lookup") {
		// libnftnl would print "__set%d" for ours and "__set0" for the kernel's.
		const std::optional<std::string> anonymous = resolveSet(expr);
		const std::string set = anonymous
			? "{ " + *anonymous + "}"
			: str(nftnl_expr_get_str(expr, NFTNL_EXPR_LOOKUP_SET));
		std::string out = fmt::format("lookup reg {} set {}",
					      exprU32(expr, NFTNL_EXPR_LOOKUP_SREG), set);
		if (nftnl_expr_is_set(expr, NFTNL_EXPR_LOOKUP_DREG))
			out += fmt::format(" dreg {}", exprU32(expr, NFTNL_EXPR_LOOKUP_DREG));
		// The kernel dumps flags 0, which nft does not send.
		return out + fmt::format(" flags {:#x}", exprU32(expr, NFTNL_EXPR_LOOKUP_FLAGS));
	}
	if (name == "masq")
		return masqText(expr);
	std::vector<char> buf(1024);
	for (;;) {
		const int n =
			nftnl_expr_snprintf(buf.data(), buf.size(), expr, NFTNL_OUTPUT_DEFAULT, 0);
		if (n < 0)
			return name + " (unprintable)";
		if (static_cast<size_t>(n) < buf.size())
			return name + " " + withoutZeroTimeout(name, expr, std::string(buf.data(), n));
		buf.resize(n + 1);
	}
}

std::string ruleText(const nftnl_rule *rule, const SetResolver &resolveSet)
{
	std::string out = "  rule";
	ExprIterPtr iter(nftnl_expr_iter_create(rule));
	if (!iter)
		throw std::bad_alloc();
	while (const nftnl_expr *expr = nftnl_expr_iter_next(iter.get()))
		out += " [ " + exprText(expr, resolveSet) + " ]";
	uint32_t len = 0;
	const void *udata = nftnl_rule_get_data(rule, NFTNL_RULE_USERDATA, &len);
	out += fmt::format(" udata {}\n", udata ? hex(udata, len) : "");
	return out;
}

std::string chainText(const nftnl_chain *chain)
{
	std::string out = "chain " + str(nftnl_chain_get_str(chain, NFTNL_CHAIN_NAME));
	if (nftnl_chain_is_set(chain, NFTNL_CHAIN_HOOKNUM))
		out += fmt::format(" type {} hook {} prio {} policy {}",
				   str(nftnl_chain_get_str(chain, NFTNL_CHAIN_TYPE)),
				   nftnl_chain_get_u32(chain, NFTNL_CHAIN_HOOKNUM),
				   nftnl_chain_get_s32(chain, NFTNL_CHAIN_PRIO),
				   nftnl_chain_get_u32(chain, NFTNL_CHAIN_POLICY));
	uint32_t len = 0;
	const void *udata = nftnl_chain_get_data(chain, NFTNL_CHAIN_USERDATA, &len);
	out += fmt::format(" udata {}\n", udata ? hex(udata, len) : "");
	return out;
}

// A named counter without its values: they count packets, and differ from what was sent
// from the first one on. (Its type, name and comment define it.)
std::string objectText(const nftnl_obj *object)
{
	auto *obj = const_cast<nftnl_obj *>(object); // libnftnl's getters only read
	uint32_t len = 0;
	const void *udata = nftnl_obj_get_data(obj, NFTNL_OBJ_USERDATA, &len);
	return fmt::format("object {} type {} udata {}\n", str(nftnl_obj_get_str(obj, NFTNL_OBJ_NAME)),
			   nftnl_obj_is_set(obj, NFTNL_OBJ_TYPE) ? nftnl_obj_get_u32(obj, NFTNL_OBJ_TYPE) : 0,
			   udata ? hex(udata, len) : "");
}

std::string tableText(const nftnl_table *table)
{
	uint32_t len = 0;
	const void *udata = nftnl_table_get_data(table, NFTNL_TABLE_USERDATA, &len);
	return fmt::format("table {} flags {:#x} udata {}\n",
			   str(nftnl_table_get_str(table, NFTNL_TABLE_NAME)),
			   u32Or0(table, NFTNL_TABLE_FLAGS, nftnl_table_is_set, nftnl_table_get_u32),
			   udata ? hex(udata, len) : "");
}

// Collects the pieces and prints them in a stable order: objects, sets and chains by name,
// rules in chain order.
class Form
{
public:
	void table(std::string text) { table_ = std::move(text); }
	void object(const std::string &name, std::string text) { objects_[name] = std::move(text); }
	void set(const std::string &name, std::string text) { sets_[name] = std::move(text); }
	void flowtable(const std::string &name) { flowtables_.push_back("flowtable " + name + "\n"); }
	void chain(const std::string &name, std::string text)
	{
		chains_[name].first = std::move(text);
	}
	void rule(const std::string &chain, std::string text)
	{
		chains_[chain].second.push_back(std::move(text));
	}

	std::string str() const
	{
		std::string out = table_;
		for (const auto &[name, text] : objects_)
			out += text;
		for (const auto &[name, text] : sets_)
			out += text;
		for (const std::string &text : flowtables_)
			out += text;
		for (const auto &[name, chain] : chains_) {
			// A rule in a chain we do not know about still shows up, unheaded.
			out += chain.first.empty() ? "chain " + name + " (missing)\n" : chain.first;
			for (const std::string &rule : chain.second)
				out += rule;
		}
		return out;
	}

private:
	std::string table_;
	std::map<std::string, std::string> objects_;
	std::map<std::string, std::string> sets_;
	std::vector<std::string> flowtables_;
	std::map<std::string, std::pair<std::string, std::vector<std::string>>> chains_;
};

// The desired elements, one chunk's libnftnl objects at a time: exactly what is sent.
ElementRecords recordsOf(const EncodedSet &set)
{
	ElementRecords records;
	for (const ElementChunk &chunk : set.elements) {
		const SetPtr carrier = chunk.build();
		records.add(carrier.get());
	}
	records.finish();
	return records;
}

// A table as text, but for its named sets' elements, which are compared as records.
struct Canonical {
	std::string text;
	std::map<std::string, const ElementRecords *> elements; // by set: the snapshot's, or owned
	std::map<std::string, ElementRecords> owned; // the desired table's
};

Canonical canonicalOf(const EncodedTable &desired)
{
	Form form;
	Canonical out;
	form.table(tableText(desired.table.get()));
	for (const EncodedObject &object : desired.objects)
		form.object(str(nftnl_obj_get_str(object.object.get(), NFTNL_OBJ_NAME)),
			    objectText(object.object.get()));
	for (const EncodedSet &set : desired.sets) {
		const std::string name = str(nftnl_set_get_str(set.set.get(), NFTNL_SET_NAME));
		form.set(name, setText(set.set.get(), true));
		if (!isDynamicSet(set.set.get()))
			out.elements[name] = &(out.owned[name] = recordsOf(set));
	}
	for (const EncodedChain &chain : desired.chains) {
		const std::string name = str(nftnl_chain_get_str(chain.chain.get(), NFTNL_CHAIN_NAME));
		form.chain(name, chainText(chain.chain.get()));
		for (const EncodedRule &rule : chain.rules) {
			// Within a batch, a lookup finds an anonymous set by its id.
			const SetResolver resolve = [&rule](const nftnl_expr *lookup)
				-> std::optional<std::string> {
				if (!nftnl_expr_is_set(lookup, NFTNL_EXPR_LOOKUP_SET_ID))
					return std::nullopt;
				const uint32_t id = exprU32(lookup, NFTNL_EXPR_LOOKUP_SET_ID);
				for (const EncodedSet &set : rule.anonymousSets)
					if (setU32(set.set.get(), NFTNL_SET_ID) == id)
						return anonymousSetText(set.set.get(), recordsOf(set));
				return std::nullopt;
			};
			form.rule(name, ruleText(rule.rule.get(), resolve));
		}
	}
	out.text = form.str();
	return out;
}

Canonical canonicalOf(const TableSnapshot &snapshot)
{
	static const ElementRecords kNone;
	const auto elementsOf = [&snapshot](const std::string &set) -> const ElementRecords & {
		const auto it = snapshot.elements.find(set);
		return it == snapshot.elements.end() ? kNone : it->second;
	};
	Form form;
	Canonical out;
	form.table(tableText(snapshot.table.get()));
	for (const ObjPtr &object : snapshot.objects)
		form.object(str(nftnl_obj_get_str(object.get(), NFTNL_OBJ_NAME)), objectText(object.get()));
	std::map<std::string, const nftnl_set *> anonymous;
	for (const SetPtr &set : snapshot.sets) {
		const std::string name = str(nftnl_set_get_str(set.get(), NFTNL_SET_NAME));
		if (setU32(set.get(), NFTNL_SET_FLAGS) & NFT_SET_ANONYMOUS) {
			anonymous[name] = set.get();
		} else {
			form.set(name, setText(set.get(), true));
			if (!isDynamicSet(set.get())) // its elements are not read (TableSnapshot)
				out.elements[name] = &elementsOf(name);
		}
	}
	for (const FlowtablePtr &flowtable : snapshot.flowtables)
		form.flowtable(str(nftnl_flowtable_get_str(flowtable.get(), NFTNL_FLOWTABLE_NAME)));
	// In the kernel, a lookup names an anonymous set by the name the kernel gave it.
	const SetResolver resolve = [&](const nftnl_expr *lookup) -> std::optional<std::string> {
		const std::string name = str(nftnl_expr_get_str(lookup, NFTNL_EXPR_LOOKUP_SET));
		const auto it = anonymous.find(name);
		if (it == anonymous.end())
			return std::nullopt;
		return anonymousSetText(it->second, elementsOf(name));
	};
	for (const ChainPtr &chain : snapshot.chains)
		form.chain(str(nftnl_chain_get_str(chain.get(), NFTNL_CHAIN_NAME)), chainText(chain.get()));
	for (const RulePtr &rule : snapshot.rules)
		form.rule(str(nftnl_rule_get_str(rule.get(), NFTNL_RULE_CHAIN)), ruleText(rule.get(), resolve));
	out.text = form.str();
	return out;
}

// The first line where two texts differ, in each.
std::string firstDifference(const std::string &desired, const std::string &actual)
{
	size_t i = 0;
	while (i < actual.size() && i < desired.size() && actual[i] == desired[i])
		i++;
	const size_t lineStart = i == 0 ? std::string::npos : desired.rfind('\n', i - 1);
	const size_t from = lineStart == std::string::npos ? 0 : lineStart + 1;
	const auto line = [from](const std::string &text) {
		return text.substr(from, text.find('\n', from) - from);
	};
	return fmt::format("desired: \"{}\", kernel: \"{}\"", line(desired), line(actual));
}

// The first element where two sets differ, in each.
std::string firstDifference(const std::string &set, const ElementRecords &desired,
			    const ElementRecords &actual)
{
	size_t i = 0;
	while (i < desired.size() && i < actual.size() && desired.line(i) == actual.line(i))
		i++;
	return fmt::format("set {} holds {} elements, {} desired; the first that differ: desired \"{}\", "
			   "kernel \"{}\"", set, actual.size(), desired.size(),
			   i < desired.size() ? desired.line(i) : "(none)",
			   i < actual.size() ? actual.line(i) : "(none)");
}

} // namespace

std::string setDeclaration(const nftnl_set *set)
{
	return setText(set, true);
}

bool isDynamicSet(const nftnl_set *set)
{
	return (setU32(set, NFTNL_SET_FLAGS) & NFT_SET_EVAL) != 0;
}

void ElementRecords::add(const nftnl_set *holder)
{
	auto *elements = const_cast<nftnl_set *>(holder); // only read
	if (nftnl_set_elem_foreach(elements, append, this) < 0)
		throw std::bad_alloc(); // the only way append() fails
}

int ElementRecords::append(nftnl_set_elem *element, void *data)
{
	auto *records = static_cast<ElementRecords *>(data);
	uint32_t keyLen = 0, udataLen = 0;
	const void *key = nftnl_set_elem_get(element, NFTNL_SET_ELEM_KEY, &keyLen);
	const void *udata = nftnl_set_elem_get(element, NFTNL_SET_ELEM_USERDATA, &udataLen);
	const uint32_t flags = nftnl_set_elem_is_set(element, NFTNL_SET_ELEM_FLAGS)
		? nftnl_set_elem_get_u32(element, NFTNL_SET_ELEM_FLAGS)
		: 0;
	keyLen = key ? std::min<uint32_t>(keyLen, UINT16_MAX) : 0;
	udataLen = udata ? std::min<uint32_t>(udataLen, UINT16_MAX) : 0;
	const uint8_t header[2] = {static_cast<uint8_t>(keyLen >> 8), static_cast<uint8_t>(keyLen)};
	const uint8_t middle[6] = {static_cast<uint8_t>(flags >> 24), static_cast<uint8_t>(flags >> 16),
				   static_cast<uint8_t>(flags >> 8), static_cast<uint8_t>(flags),
				   static_cast<uint8_t>(udataLen >> 8), static_cast<uint8_t>(udataLen)};
	try {
		records->starts_.push_back(static_cast<uint32_t>(records->bytes_.size()));
		records->bytes_.append(reinterpret_cast<const char *>(header), sizeof(header));
		records->bytes_.append(static_cast<const char *>(key), keyLen);
		records->bytes_.append(reinterpret_cast<const char *>(middle), sizeof(middle));
		records->bytes_.append(static_cast<const char *>(udata), udataLen);
	} catch (...) {
		return -1;
	}
	return 0;
}

void ElementRecords::finish()
{
	// A read is kept until the next one (table_read.h): no room left over from the growth.
	bytes_.shrink_to_fit();
	starts_.shrink_to_fit();
	// The encoder sends an interval set's elements in order, and the kernel dumps them in
	// reverse: most often nothing is left to sort.
	const auto before = [this](uint32_t a, uint32_t b) { return recordAt(a) < recordAt(b); };
	if (std::is_sorted(starts_.rbegin(), starts_.rend(), before))
		std::reverse(starts_.begin(), starts_.end());
	else if (!std::is_sorted(starts_.begin(), starts_.end(), before))
		std::sort(starts_.begin(), starts_.end(), before);
}

std::string_view ElementRecords::recordAt(uint32_t start) const
{
	const auto *at = reinterpret_cast<const uint8_t *>(bytes_.data()) + start;
	const size_t keyLen = (at[0] << 8) | at[1];
	const size_t udataLen = (at[2 + keyLen + 4] << 8) | at[2 + keyLen + 5];
	return std::string_view(bytes_).substr(start, 2 + keyLen + 6 + udataLen);
}

std::span<const uint8_t> ElementRecords::key(size_t i) const
{
	const std::string_view record = recordAt(starts_[i]);
	const auto *at = reinterpret_cast<const uint8_t *>(record.data());
	return {at + 2, static_cast<size_t>((at[0] << 8) | at[1])};
}

uint32_t ElementRecords::flags(size_t i) const
{
	const std::span<const uint8_t> k = key(i);
	const uint8_t *at = k.data() + k.size();
	return (uint32_t{at[0]} << 24) | (uint32_t{at[1]} << 16) | (uint32_t{at[2]} << 8) | at[3];
}

std::string ElementRecords::line(size_t i) const
{
	const std::span<const uint8_t> k = key(i);
	const std::string_view record = recordAt(starts_[i]);
	const size_t udataAt = 2 + k.size() + 6;
	return fmt::format("elem {} flags {:#x} udata {}", k.empty() ? "-" : hex(k.data(), k.size()),
			   flags(i), hex(record.data() + udataAt, record.size() - udataAt));
}

bool ElementRecords::operator==(const ElementRecords &other) const
{
	if (size() != other.size())
		return false;
	for (size_t i = 0; i < size(); i++)
		if (recordAt(starts_[i]) != other.recordAt(other.starts_[i]))
			return false;
	return true;
}

bool sameTable(const EncodedTable &desired, const TableSnapshot &kernel, std::string &difference)
{
	const Canonical want = canonicalOf(desired);
	const Canonical got = canonicalOf(kernel);
	if (want.text != got.text) {
		difference = firstDifference(want.text, got.text);
		return false;
	}
	// The same sets are declared: only their elements can differ now. Both sides leave out
	// the same (dynamic) sets' elements, as their declarations are equal; a set the read has
	// no elements for is a difference all the same, never an exception.
	for (const auto &[set, elements] : want.elements) {
		const auto held = got.elements.find(set);
		if (held == got.elements.end() || !held->second) {
			difference = fmt::format("desired: the elements of set {}, kernel: none read", set);
			return false;
		}
		if (!(*elements == *held->second)) {
			difference = firstDifference(set, *elements, *held->second);
			return false;
		}
	}
	return true;
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

} // namespace

TableContents contentsOf(const TableSnapshot &snapshot)
{
	TableContents contents;
	contents.generation = snapshot.generation;
	const nftnl_table *table = snapshot.table.get();
	if (nftnl_table_is_set(table, NFTNL_TABLE_FLAGS))
		contents.flags = nftnl_table_get_u32(table, NFTNL_TABLE_FLAGS);
	uint32_t len = 0;
	const void *data = nftnl_table_get_data(table, NFTNL_TABLE_USERDATA, &len);
	contents.comment = userdataComment(data, len, NFTNL_UDATA_TABLE_COMMENT);
	for (const ChainPtr &chain : snapshot.chains) // a rule's anonymous chain goes with the rule
		if (!(u32Or0(chain.get(), NFTNL_CHAIN_FLAGS, nftnl_chain_is_set, nftnl_chain_get_u32) &
		      NFT_CHAIN_BINDING))
			contents.chains.push_back(stringOf(nftnl_chain_get_str(chain.get(), NFTNL_CHAIN_NAME)));
	for (const SetPtr &set : snapshot.sets) { // an anonymous set goes with its rule
		if (setU32(set.get(), NFTNL_SET_FLAGS) & NFT_SET_ANONYMOUS)
			continue;
		contents.sets.push_back(stringOf(nftnl_set_get_str(set.get(), NFTNL_SET_NAME)));
		if (isDynamicSet(set.get()))
			contents.dynamicSets.emplace_back(contents.sets.back(), setDeclaration(set.get()));
	}
	for (const ObjPtr &object : snapshot.objects)
		contents.objects.push_back(objectOf(object.get()));
	for (const FlowtablePtr &flowtable : snapshot.flowtables)
		contents.flowtables.push_back(
			stringOf(nftnl_flowtable_get_str(flowtable.get(), NFTNL_FLOWTABLE_NAME)));
	return contents;
}

std::vector<CounterValue> countersOf(const std::vector<ObjPtr> &objects)
{
	std::vector<CounterValue> values;
	for (const ObjPtr &object : objects) {
		nftnl_obj *obj = object.get();
		const char *name = nftnl_obj_get_str(obj, NFTNL_OBJ_NAME);
		if (!name || nftnl_obj_get_u32(obj, NFTNL_OBJ_TYPE) != NFT_OBJECT_COUNTER)
			continue;
		values.push_back(CounterValue{name, nftnl_obj_get_u64(obj, NFTNL_OBJ_CTR_PKTS),
					      nftnl_obj_get_u64(obj, NFTNL_OBJ_CTR_BYTES)});
	}
	return values;
}

namespace {

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

// A named interval set of the kinds AddressSet models: addresses of a family, or interface
// names (held as Family::ipv6's 128-bit width).
struct DeclaredSet {
	std::string name;
	Family family;
	bool interfaceNames;
	std::string comment;
};

std::optional<DeclaredSet> addressSetOf(const nftnl_set *set)
{
	// A dynamic set's elements are traffic, never read (TableSnapshot): nothing to rebuild.
	const uint32_t flags = setU32(set, NFTNL_SET_FLAGS);
	if ((flags & NFT_SET_INTERVAL) == 0 || (flags & (NFT_SET_ANONYMOUS | NFT_SET_EVAL)) != 0)
		return std::nullopt;
	const uint32_t type = setU32(set, NFTNL_SET_KEY_TYPE);
	const uint32_t keyLen = setU32(set, NFTNL_SET_KEY_LEN);
	uint32_t len = 0;
	const void *data = nftnl_set_get_data(set, NFTNL_SET_USERDATA, &len);
	DeclaredSet declared{stringOf(nftnl_set_get_str(set, NFTNL_SET_NAME)), Family::ipv6, false,
			     userdataComment(data, len, NFTNL_UDATA_SET_COMMENT)};
	if (type == kTypeIpv4Address && keyLen == 4)
		declared.family = Family::ipv4;
	else if (type == kTypeInterfaceName && keyLen == 16)
		declared.interfaceNames = true;
	else if (type != kTypeIpv6Address || keyLen != 16)
		return std::nullopt;
	return declared;
}

// The ranges an interval set's elements describe: each start element opens a range, the
// next end element (the first address after it) closes it; a range left open runs to the
// top address. Anything else (two starts in a row) is not what nft writes.
Result<AddressSet> rangesOf(const DeclaredSet &set, const ElementRecords &elements)
{
	struct Boundary {
		AddressValue value;
		bool end;
	};
	std::vector<Boundary> boundaries;
	boundaries.reserve(elements.size());
	const size_t keyLen = familyBits(set.family) / 8;
	for (size_t i = 0; i < elements.size(); i++) {
		const std::span<const uint8_t> key = elements.key(i);
		if (key.size() != keyLen)
			return fail(fmt::format("set {} holds elements that are not {}", set.name,
						set.interfaceNames ? "interface names"
								   : familyName(set.family) + std::string(" addresses")),
				    EPROTO);
		AddressValue value = 0;
		for (uint8_t byte : key)
			value = (value << 8) | byte;
		boundaries.push_back({value, (elements.flags(i) & NFT_SET_ELEM_INTERVAL_END) != 0});
	}
	std::sort(boundaries.begin(), boundaries.end(), [](const Boundary &a, const Boundary &b) {
		return a.value != b.value ? a.value < b.value : a.end > b.end; // ends first
	});
	std::vector<AddressRange> ranges;
	// A plain flag and value: g++ 12 warns (wrongly) on an optional<__int128> here.
	bool open = false;
	AddressValue start = 0;
	for (const Boundary &boundary : boundaries) {
		if (!boundary.end) {
			if (open)
				return fail(fmt::format("set {} has two range starts in a row", set.name), EPROTO);
			open = true;
			start = boundary.value;
		} else if (open) {
			ranges.push_back({Address{set.family, start}, Address{set.family, boundary.value - 1}});
			open = false;
		}
	}
	if (open)
		ranges.push_back({Address{set.family, start}, Address::max(set.family)});
	return AddressSet{set.name, IntervalSet::fromRanges(set.family, std::move(ranges)), set.comment,
			  set.interfaceNames};
}

} // namespace

Result<KernelTable> kernelTableOf(const TableSnapshot &snapshot)
{
	// Every address set of the table, whatever its name: a set the agent adds needs no
	// change here. Anonymous sets ({ tcp, udp, sctp }) belong to their rules.
	static const ElementRecords kNone;
	KernelTable read;
	for (const SetPtr &set : snapshot.sets) {
		const std::optional<DeclaredSet> declared = addressSetOf(set.get());
		if (!declared)
			continue;
		const auto elements = snapshot.elements.find(declared->name);
		auto ranges = rangesOf(*declared, elements == snapshot.elements.end() ? kNone : elements->second);
		if (!ranges)
			return fail(ranges.error());
		read.sets.push_back(std::move(*ranges));
	}
	for (const RulePtr &rule : snapshot.rules)
		if (auto snat = snatRuleOf(rule.get()))
			read.snatRules.push_back(std::move(*snat));
	return read;
}

} // namespace ipmasq::netlink
