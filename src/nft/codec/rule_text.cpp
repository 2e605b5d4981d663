// SPDX-License-Identifier: Apache-2.0
// Decoded rules in nft's listing syntax, in nft 1.0.6's steps (read, not copied): the
// rule's values become expression trees and its statements nft's (rule_text_delinearize),
// the statements are post-processed in order with a protocol context
// (rule_text_postprocess, with rule_text_payload and rule_text_exthdr), then each prints
// through the statement table (rule_text_statement), as nft's rule_print prints a rule.
#include "ip-masq-agent/nft/codec/rule_text.h"

#include <fmt/format.h>

#include "ip-masq-agent/nft/codec/rule_text_parts.h"

namespace ipmasq::nft {

std::string ruleText(const Table &table, const Rule &rule)
{
	text::Tree tree;
	std::vector<text::Stmt> stmts = text::delinearize(tree, table, rule);
	text::postprocess(tree, stmts, table.family);
	// As nft's rule_print: one space between statements, also after one that prints
	// nothing (an iptables comment).
	const text::Output output{tree, table};
	std::string out;
	bool first = true;
	for (const text::Stmt &s : stmts)
		if (!s.removed) {
			out += first ? "" : " ";
			out += text::printStatement(output, s);
			first = false;
		}
	if (!rule.comment.empty())
		out += fmt::format("{}comment \"{}\"", first ? "" : " ", text::printable(rule.comment));
	// A listing line is indented: what nft shows of a rule that starts or ends with an
	// empty statement has no space there.
	const size_t from = out.find_first_not_of(' '), to = out.find_last_not_of(' ');
	return from == std::string::npos ? std::string() : out.substr(from, to - from + 1);
}

} // namespace ipmasq::nft
