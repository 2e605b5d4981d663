// SPDX-License-Identifier: Apache-2.0
// Encoding and decoding the kernel's expressions from one attribute list per kind.
#include "ip-masq-agent/nft/codec/expression.h"

#include <cstring>
#include <type_traits>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>

namespace ipmasq::nft {

namespace {

template<typename T>
struct IsOptional : std::false_type {};
template<typename T>
struct IsOptional<std::optional<T>> : std::true_type {};

// One attribute into the nftnl expression; an absent optional is left out.
template<typename T>
void put(nftnl_expr *e, uint16_t attribute, const T &value)
{
	if constexpr (IsOptional<T>::value) {
		if (value)
			put(e, attribute, *value);
	} else if constexpr (std::is_same_v<T, std::string>) {
		nftnl_expr_set_str(e, attribute, value.c_str());
	} else if constexpr (std::is_same_v<T, Bytes>) {
		if (!value.empty())
			nftnl_expr_set(e, attribute, value.data(), static_cast<uint32_t>(value.size()));
	} else {
		static_assert(std::is_integral_v<T>);
		nftnl_expr_set(e, attribute, &value, sizeof(value));
	}
}

// One attribute out of the nftnl expression, if the kernel sent it (and at the width the
// kind declares: anything else is left as it was).
template<typename T>
void take(const nftnl_expr *e, uint16_t attribute, T &value)
{
	if (!nftnl_expr_is_set(e, attribute))
		return;
	uint32_t len = 0;
	const auto *data = static_cast<const uint8_t *>(nftnl_expr_get(e, attribute, &len));
	if (!data)
		return;
	if constexpr (IsOptional<T>::value) {
		typename T::value_type v{};
		take(e, attribute, v);
		value = std::move(v);
	} else if constexpr (std::is_same_v<T, std::string>) {
		value.assign(reinterpret_cast<const char *>(data), strnlen(reinterpret_cast<const char *>(data), len));
	} else if constexpr (std::is_same_v<T, Bytes>) {
		value.assign(data, data + len);
	} else {
		if (len == sizeof(value))
			std::memcpy(&value, data, sizeof(value));
	}
}

template<typename Kind>
Expression decodeAs(const nftnl_expr *e)
{
	Kind kind;
	Kind::fields(kind, [e](uint16_t attribute, auto &member) { take(e, attribute, member); });
	return kind;
}

// A dynset's statements: a nested expression, or a list of them.
void decodeNested(const nftnl_expr *e, Dynset &dynset)
{
	const auto add = [](nftnl_expr *nested, void *data) -> int {
		auto *out = static_cast<Dynset *>(data);
		try {
			out->statements.push_back({std::make_shared<const Expression>(decode(nested))});
			return 0;
		} catch (...) {
			return -1; // no exception crosses libnftnl
		}
	};
	if (nftnl_expr_is_set(e, NFTNL_EXPR_DYNSET_EXPR)) {
		uint32_t len = 0;
		if (const auto *nested = static_cast<const nftnl_expr *>(nftnl_expr_get(e, NFTNL_EXPR_DYNSET_EXPR, &len)))
			dynset.statements.push_back({std::make_shared<const Expression>(decode(nested))});
	} else if (nftnl_expr_is_set(e, NFTNL_EXPR_DYNSET_EXPRESSIONS) &&
		   nftnl_expr_expr_foreach(e, add, &dynset) < 0) {
		throw std::bad_alloc();
	}
}

// A dynset's statements as nft sends them: one as NFTNL_EXPR_DYNSET_EXPR, several as a list.
void encodeNested(nftnl_expr *e, const Dynset &dynset)
{
	for (const ExpressionBox &nested : dynset.statements) {
		netlink::ExprPtr inner = encode(*nested.expression);
		if (dynset.statements.size() == 1)
			nftnl_expr_set(e, NFTNL_EXPR_DYNSET_EXPR, inner.release(), 0);
		else
			nftnl_expr_add_expr(e, NFTNL_EXPR_DYNSET_EXPRESSIONS, inner.release());
	}
}

template<size_t I = 0>
Expression decodeByName(const std::string &name, const nftnl_expr *e)
{
	using Kind = std::variant_alternative_t<I, Expression>;
	if constexpr (I + 1 == std::variant_size_v<Expression>) {
		return UnknownExpression{name};
	} else {
		if (name != Kind::kName)
			return decodeByName<I + 1>(name, e);
		Expression out = decodeAs<Kind>(e);
		if constexpr (std::is_same_v<Kind, Dynset>)
			decodeNested(e, std::get<Dynset>(out));
		return out;
	}
}

} // namespace

int32_t verdictNumber(VerdictCode code)
{
	switch (code) {
	case VerdictCode::accept: return NF_ACCEPT;
	case VerdictCode::drop: return NF_DROP;
	case VerdictCode::queue: return NF_QUEUE;
	case VerdictCode::stolen: return NF_STOLEN;
	case VerdictCode::continueRule: return NFT_CONTINUE;
	case VerdictCode::breakRule: return NFT_BREAK;
	case VerdictCode::jump: return NFT_JUMP;
	case VerdictCode::goTo: return NFT_GOTO;
	case VerdictCode::returnToCaller: return NFT_RETURN;
	}
	return NFT_CONTINUE;
}

Verdict verdictOf(int32_t number, std::string chain)
{
	switch (number) {
	case NF_ACCEPT: return {VerdictCode::accept};
	case NF_DROP: return {VerdictCode::drop};
	case NF_STOLEN: return {VerdictCode::stolen};
	case NFT_CONTINUE: return {VerdictCode::continueRule};
	case NFT_BREAK: return {VerdictCode::breakRule};
	case NFT_JUMP: return {VerdictCode::jump, std::move(chain)};
	case NFT_GOTO: return {VerdictCode::goTo, std::move(chain)};
	case NFT_RETURN: return {VerdictCode::returnToCaller};
	default: return {VerdictCode::queue}; // NF_QUEUE carries the queue number in its upper bits
	}
}

netlink::ExprPtr encode(const Expression &expression)
{
	return std::visit(
		[](const auto &kind) {
			using Kind = std::decay_t<decltype(kind)>;
			const char *name = Kind::kName;
			if constexpr (std::is_same_v<Kind, UnknownExpression>)
				name = kind.name.c_str();
			netlink::ExprPtr e = netlink::newExpr(name);
			Kind::fields(kind, [&e](uint16_t attribute, const auto &member) { put(e.get(), attribute, member); });
			if constexpr (std::is_same_v<Kind, Dynset>)
				encodeNested(e.get(), kind);
			return e;
		},
		expression);
}

void encodeInto(nftnl_rule *rule, const std::vector<Expression> &expressions)
{
	for (const Expression &expression : expressions)
		nftnl_rule_add_expr(rule, encode(expression).release());
}

Expression decode(const nftnl_expr *e)
{
	const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
	return decodeByName(name ? name : "", e);
}

std::vector<Expression> decodeRuleExpressions(const nftnl_rule *rule, size_t limit)
{
	std::vector<Expression> out;
	netlink::ExprIterPtr iter(nftnl_expr_iter_create(rule));
	if (!iter)
		throw std::bad_alloc();
	while (const nftnl_expr *e = nftnl_expr_iter_next(iter.get())) {
		if (out.size() >= limit)
			break;
		out.push_back(decode(e));
	}
	return out;
}

std::string nameOf(const Expression &expression)
{
	return std::visit(
		[](const auto &kind) -> std::string {
			if constexpr (std::is_same_v<std::decay_t<decltype(kind)>, UnknownExpression>)
				return kind.name;
			else
				return std::decay_t<decltype(kind)>::kName;
		},
		expression);
}

} // namespace ipmasq::nft
