// SPDX-License-Identifier: Apache-2.0
// Canonical text of desired and dumped tables, for comparing them.
#include "ip-masq-agent/nft/snapshot.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string_view>

#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>

namespace ipmasq::netlink {

namespace {

// Called for every element of a set, twice per comparison: no formatting machinery.
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

// nftnl_set_elem_foreach is the reliable way to walk elements; its callback is C, so
// nothing may be thrown through it.
int collectElement(nftnl_set_elem *elem, void *data)
{
	auto *lines = static_cast<std::vector<std::string> *>(data);
	try {
		uint32_t keyLen = 0, udataLen = 0;
		const void *key = nftnl_set_elem_get(elem, NFTNL_SET_ELEM_KEY, &keyLen);
		const void *udata = nftnl_set_elem_get(elem, NFTNL_SET_ELEM_USERDATA, &udataLen);
		const uint32_t flags = nftnl_set_elem_is_set(elem, NFTNL_SET_ELEM_FLAGS)
			? nftnl_set_elem_get_u32(elem, NFTNL_SET_ELEM_FLAGS)
			: 0;
		lines->push_back(fmt::format("  elem {} flags {:#x} udata {}",
					     key ? hex(key, keyLen) : "-", flags,
					     udata ? hex(udata, udataLen) : ""));
		return 0;
	} catch (...) {
		return -1;
	}
}

// A set's declaration and its elements' lines (see appendElementLines). The lines are
// printed sorted: the kernel dumps interval sets in its own tree order, and order
// carries no meaning in a set.
std::string setText(const nftnl_set *set, const std::vector<std::string> &elements,
		    bool withName)
{
	std::string out = fmt::format(
		"set {} flags {:#x} key {}/{} data {}/{} size {} policy {} timeout {} udata {}\n",
		withName ? str(nftnl_set_get_str(set, NFTNL_SET_NAME)) : "(anonymous)",
		setU32(set, NFTNL_SET_FLAGS), setU32(set, NFTNL_SET_KEY_TYPE),
		setU32(set, NFTNL_SET_KEY_LEN), setU32(set, NFTNL_SET_DATA_TYPE),
		setU32(set, NFTNL_SET_DATA_LEN), setU32(set, NFTNL_SET_DESC_SIZE),
		setU32(set, NFTNL_SET_POLICY),
		nftnl_set_is_set(set, NFTNL_SET_TIMEOUT) ? nftnl_set_get_u64(set, NFTNL_SET_TIMEOUT)
							 : 0,
		setUserdata(set));
	std::vector<std::string_view> sorted(elements.begin(), elements.end());
	std::sort(sorted.begin(), sorted.end());
	size_t bytes = out.size();
	for (std::string_view line : sorted)
		bytes += line.size() + 1;
	out.reserve(bytes);
	for (std::string_view line : sorted) {
		out += line;
		out += '\n';
	}
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

// Collects the pieces and prints them in a stable order: sets and chains by name,
// rules in chain order.
class Form
{
public:
	void table(std::string text) { table_ = std::move(text); }
	void object(const std::string &name, std::string text) { objects_[name] = std::move(text); }
	void set(const std::string &name, std::string text) { sets_[name] = std::move(text); }
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
	std::map<std::string, std::pair<std::string, std::vector<std::string>>> chains_;
};

// The desired elements, one chunk's libnftnl objects at a time.
std::vector<std::string> elementLines(const EncodedSet &set)
{
	std::vector<std::string> lines;
	for (const ElementChunk &chunk : set.elements) {
		const SetPtr carrier = chunk.build();
		appendElementLines(carrier.get(), lines);
	}
	return lines;
}

const std::vector<std::string> &dumpedElements(const TableSnapshot &snapshot,
					       const std::string &set)
{
	static const std::vector<std::string> kNone;
	const auto it = snapshot.elements.find(set);
	return it == snapshot.elements.end() ? kNone : it->second;
}

} // namespace

std::string setDeclaration(const nftnl_set *set)
{
	return setText(set, {}, true);
}

bool isDynamicSet(const nftnl_set *set)
{
	return (setU32(set, NFTNL_SET_FLAGS) & NFT_SET_EVAL) != 0;
}

void appendElementLines(const nftnl_set *holder, std::vector<std::string> &lines)
{
	auto *elements = const_cast<nftnl_set *>(holder); // only read
	if (nftnl_set_elem_foreach(elements, collectElement, &lines) < 0)
		throw std::bad_alloc(); // the only way collectElement fails
}

std::string canonicalForm(const EncodedTable &desired)
{
	Form form;
	form.table(tableText(desired.table.get()));
	for (const EncodedObject &object : desired.objects)
		form.object(str(nftnl_obj_get_str(object.object.get(), NFTNL_OBJ_NAME)),
			    objectText(object.object.get()));
	for (const EncodedSet &set : desired.sets)
		form.set(str(nftnl_set_get_str(set.set.get(), NFTNL_SET_NAME)),
			 setText(set.set.get(), elementLines(set), true));
	for (const EncodedChain &chain : desired.chains) {
		const nftnl_chain *object = chain.chain.get();
		const std::string name = str(nftnl_chain_get_str(object, NFTNL_CHAIN_NAME));
		form.chain(name, chainText(chain.chain.get()));
		for (const EncodedRule &rule : chain.rules) {
			// Within a batch, a lookup finds an anonymous set by its id.
			const SetResolver resolve = [&rule](const nftnl_expr *lookup)
				-> std::optional<std::string> {
				if (!nftnl_expr_is_set(lookup, NFTNL_EXPR_LOOKUP_SET_ID))
					return std::nullopt;
				const uint32_t id = exprU32(lookup, NFTNL_EXPR_LOOKUP_SET_ID);
				for (const EncodedSet &set : rule.anonymousSets) {
					const nftnl_set *object = set.set.get();
					if (setU32(object, NFTNL_SET_ID) == id)
						return setText(object, elementLines(set),
							       false);
				}
				return std::nullopt;
			};
			form.rule(name, ruleText(rule.rule.get(), resolve));
		}
	}
	return form.str();
}

std::string canonicalForm(const TableSnapshot &snapshot)
{
	Form form;
	form.table(tableText(snapshot.table.get()));
	for (const ObjPtr &object : snapshot.objects)
		form.object(str(nftnl_obj_get_str(object.get(), NFTNL_OBJ_NAME)),
			    objectText(object.get()));
	std::map<std::string, const nftnl_set *> anonymous;
	for (const SetPtr &set : snapshot.sets) {
		const std::string name = str(nftnl_set_get_str(set.get(), NFTNL_SET_NAME));
		if (setU32(set.get(), NFTNL_SET_FLAGS) & NFT_SET_ANONYMOUS)
			anonymous[name] = set.get();
		else if (isDynamicSet(set.get()))
			form.set(name, setDeclaration(set.get()));
		else
			form.set(name, setText(set.get(), dumpedElements(snapshot, name), true));
	}
	// In the kernel, a lookup names an anonymous set by the name the kernel gave it.
	const SetResolver resolve = [&anonymous, &snapshot](const nftnl_expr *lookup)
		-> std::optional<std::string> {
		const std::string name = str(nftnl_expr_get_str(lookup, NFTNL_EXPR_LOOKUP_SET));
		const auto it = anonymous.find(name);
		if (it == anonymous.end())
			return std::nullopt;
		return setText(it->second, dumpedElements(snapshot, name), false);
	};
	for (const ChainPtr &chain : snapshot.chains)
		form.chain(str(nftnl_chain_get_str(chain.get(), NFTNL_CHAIN_NAME)),
			   chainText(chain.get()));
	for (const RulePtr &rule : snapshot.rules)
		form.rule(str(nftnl_rule_get_str(rule.get(), NFTNL_RULE_CHAIN)),
			  ruleText(rule.get(), resolve));
	return form.str();
}

} // namespace ipmasq::netlink
