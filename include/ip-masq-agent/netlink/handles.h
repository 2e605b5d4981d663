// SPDX-License-Identifier: Apache-2.0
// RAII owners for libnftnl and libmnl handles: std::unique_ptr with stateless deleters.
//
// Ownership transfer is the one trap: nftnl_rule_add_expr() takes the expression and
// nftnl_set_elem_add() takes the element, so callers hand those over with release()
// right at the call and never free them again.
#pragma once

#include <memory>
#include <new>

#include <libmnl/libmnl.h>
#include <libnftnl/batch.h>
#include <libnftnl/chain.h>
#include <libnftnl/expr.h>
#include <libnftnl/flowtable.h>
#include <libnftnl/gen.h>
#include <libnftnl/object.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>

namespace ipmasq::netlink {

struct TableDeleter {
	void operator()(nftnl_table *table) const { nftnl_table_free(table); }
};
struct ChainDeleter {
	void operator()(nftnl_chain *chain) const { nftnl_chain_free(chain); }
};
struct SetDeleter {
	void operator()(nftnl_set *set) const { nftnl_set_free(set); }
};
struct FlowtableDeleter {
	void operator()(nftnl_flowtable *flowtable) const { nftnl_flowtable_free(flowtable); }
};
struct ObjDeleter {
	void operator()(nftnl_obj *obj) const { nftnl_obj_free(obj); }
};
struct SetElemDeleter {
	void operator()(nftnl_set_elem *elem) const { nftnl_set_elem_free(elem); }
};
struct RuleDeleter {
	void operator()(nftnl_rule *rule) const { nftnl_rule_free(rule); }
};
struct ExprDeleter {
	void operator()(nftnl_expr *expr) const { nftnl_expr_free(expr); }
};
struct GenDeleter {
	void operator()(nftnl_gen *gen) const { nftnl_gen_free(gen); }
};
struct UdataBufDeleter {
	void operator()(nftnl_udata_buf *buf) const { nftnl_udata_buf_free(buf); }
};
struct BatchDeleter {
	void operator()(nftnl_batch *batch) const { nftnl_batch_free(batch); }
};
struct ExprIterDeleter {
	void operator()(nftnl_expr_iter *iter) const { nftnl_expr_iter_destroy(iter); }
};
struct SetElemsIterDeleter {
	void operator()(nftnl_set_elems_iter *iter) const { nftnl_set_elems_iter_destroy(iter); }
};
struct MnlSocketDeleter {
	void operator()(mnl_socket *socket) const { mnl_socket_close(socket); }
};

using TablePtr = std::unique_ptr<nftnl_table, TableDeleter>;
using ChainPtr = std::unique_ptr<nftnl_chain, ChainDeleter>;
using SetPtr = std::unique_ptr<nftnl_set, SetDeleter>;
using ObjPtr = std::unique_ptr<nftnl_obj, ObjDeleter>;
using FlowtablePtr = std::unique_ptr<nftnl_flowtable, FlowtableDeleter>;
using SetElemPtr = std::unique_ptr<nftnl_set_elem, SetElemDeleter>;
using RulePtr = std::unique_ptr<nftnl_rule, RuleDeleter>;
using ExprPtr = std::unique_ptr<nftnl_expr, ExprDeleter>;
using GenPtr = std::unique_ptr<nftnl_gen, GenDeleter>;
using UdataBufPtr = std::unique_ptr<nftnl_udata_buf, UdataBufDeleter>;
using BatchPtr = std::unique_ptr<nftnl_batch, BatchDeleter>;
using ExprIterPtr = std::unique_ptr<nftnl_expr_iter, ExprIterDeleter>;
using SetElemsIterPtr = std::unique_ptr<nftnl_set_elems_iter, SetElemsIterDeleter>;
using MnlSocketPtr = std::unique_ptr<mnl_socket, MnlSocketDeleter>;

// The *_alloc() functions only fail when memory is exhausted: report that the way
// operator new does, so that no caller carries a null handle around.
template<typename Ptr>
Ptr allocated(typename Ptr::pointer raw)
{
	if (!raw)
		throw std::bad_alloc();
	return Ptr(raw);
}

inline TablePtr newTable() { return allocated<TablePtr>(nftnl_table_alloc()); }
inline ChainPtr newChain() { return allocated<ChainPtr>(nftnl_chain_alloc()); }
inline SetPtr newSet() { return allocated<SetPtr>(nftnl_set_alloc()); }
inline ObjPtr newObj() { return allocated<ObjPtr>(nftnl_obj_alloc()); }
inline FlowtablePtr newFlowtable() { return allocated<FlowtablePtr>(nftnl_flowtable_alloc()); }
inline SetElemPtr newSetElem() { return allocated<SetElemPtr>(nftnl_set_elem_alloc()); }
inline RulePtr newRule() { return allocated<RulePtr>(nftnl_rule_alloc()); }
inline ExprPtr newExpr(const char *name) { return allocated<ExprPtr>(nftnl_expr_alloc(name)); }
inline GenPtr newGen() { return allocated<GenPtr>(nftnl_gen_alloc()); }

} // namespace ipmasq::netlink
