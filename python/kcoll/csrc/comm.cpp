/*
 * The communicator and the translation of tensors, dtypes and reduce ops into coll.h arguments
 * (comm.h).
 */
#include "comm.h"

#include <ATen/MemoryOverlap.h>

#include <chrono>
#include <stdexcept>

namespace py = pybind11;

namespace kcoll
{

[[noreturn]] void fail(const std::string &what, coll_result_t r)
{
    const char *detail = coll_get_last_error();
    std::string msg = "kcoll: " + what + " failed: " + coll_get_error_string(r);
    if (detail != nullptr && detail[0] != '\0')
        msg += ": " + std::string(detail);
    throw std::runtime_error(msg);
}

void check(coll_result_t r, const std::string &what)
{
    if (r != COLL_SUCCESS)
        fail(what, r);
}

std::shared_ptr<Comm> init_rank(const std::string &uid, int rank, int nranks, double timeout_s)
{
    coll_unique_id_t id;
    check(coll_unique_id_from_string(&id, uid.c_str()), "coll_unique_id_from_string");
    coll_comm_t c = nullptr;
    coll_result_t r;
    {
        py::gil_scoped_release nogil;
        r = coll_comm_init_rank_timeout(&c, nranks, id, rank, group_deadline(timeout_s));
    }
    check(r, "coll_comm_init_rank (rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                 ")");
    return std::make_shared<Comm>(c);
}

std::shared_ptr<Comm> init_agent(double timeout_s)
{
    coll_comm_t c = nullptr;
    coll_result_t r;
    {
        py::gil_scoped_release nogil;
        r = coll_comm_init_agent_timeout(&c, group_deadline(timeout_s));
    }
    check(r, "coll_comm_init_agent");
    return std::make_shared<Comm>(c);
}

std::string unique_id(double timeout_s)
{
    coll_unique_id_t id;
    check(coll_get_unique_id_timeout(&id, group_deadline(timeout_s)), "coll_get_unique_id");
    char buf[COLL_UNIQUE_ID_STRLEN];
    check(coll_unique_id_to_string(&id, buf, sizeof buf), "coll_unique_id_to_string");
    return std::string(buf);
}

/* Root's bytes on every rank (the rendezvous uses it to share the store's address). */
py::bytes broadcast_bytes(const std::shared_ptr<Comm> &comm, const std::string &data, int root,
                          size_t len)
{
    TORCH_CHECK(data.size() <= len, "kcoll: broadcast_bytes: ", data.size(),
                " bytes do not fit in ", len);
    std::string buf(data);
    buf.resize(len, '\0');
    coll_result_t r;
    {
        py::gil_scoped_release nogil;
        r = coll_broadcast(buf.data(), &buf[0], len, COLL_UINT8, root, comm->get(), nullptr);
    }
    check(r, "coll_broadcast");
    return py::bytes(buf);
}

/* kcoll's datatype for t's, or false. */
static bool known_dtype(const at::Tensor &t, coll_datatype_t *out)
{
    coll_datatype_t dt;
    switch (t.scalar_type()) {
    case at::kFloat:
        dt = COLL_FLOAT32;
        break;
    case at::kDouble:
        dt = COLL_FLOAT64;
        break;
    case at::kHalf:
        dt = COLL_FLOAT16;
        break;
    case at::kBFloat16:
        dt = COLL_BFLOAT16;
        break;
    case at::kChar:
        dt = COLL_INT8;
        break;
    case at::kByte:
    case at::kBool: /* one byte, 0 or 1 */
        dt = COLL_UINT8;
        break;
    case at::kInt:
        dt = COLL_INT32;
        break;
    case at::kLong:
        dt = COLL_INT64;
        break;
#if KCOLL_TORCH_HAS_FLOAT8
    case c10::ScalarType::Float8_e4m3fn: /* OCP E4M3: no infinities, largest finite 448 */
        dt = COLL_FLOAT8_E4M3;
        break;
    case c10::ScalarType::Float8_e5m2:
        dt = COLL_FLOAT8_E5M2;
        break;
#endif
    default:
        return false;
    }
    *out = dt;
    return true;
}

coll_datatype_t dtype_of(const at::Tensor &t)
{
    coll_datatype_t dt = COLL_UINT8;
    TORCH_CHECK(known_dtype(t, &dt), "kcoll: dtype ", t.scalar_type(),
                " is not supported in reductions (kcoll has float16, bfloat16, float32, float64, "
                "int8, uint8, int32, int64 and bool)");
    return dt;
}

Moved moved(const at::Tensor &t, size_t count)
{
    coll_datatype_t dt = COLL_UINT8;
    if (known_dtype(t, &dt))
        return {dt, count};
    return {COLL_UINT8, count * t.element_size()};
}

coll_op_t op_of(const c10d::ReduceOp &op, const at::Tensor &t)
{
    bool is_bool = t.scalar_type() == at::kBool;
    switch (op) {
    case c10d::ReduceOp::SUM:
        return is_bool ? COLL_MAX : COLL_SUM; /* logical or */
    case c10d::ReduceOp::PREMUL_SUM:
        return COLL_SUM; /* the base; OpFor makes the PreMulSum operator */
    case c10d::ReduceOp::PRODUCT:
        return is_bool ? COLL_MIN : COLL_PROD; /* logical and */
    case c10d::ReduceOp::MIN:
        return COLL_MIN;
    case c10d::ReduceOp::MAX:
        return COLL_MAX;
    case c10d::ReduceOp::AVG:
        TORCH_CHECK(!is_bool, "kcoll: ReduceOp.AVG of bool tensors is not defined");
        return COLL_AVG;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
        TORCH_CHECK(!t.is_floating_point() && !t.is_complex(), "kcoll: ReduceOp.",
                    op == c10d::ReduceOp::BAND  ? "BAND"
                    : op == c10d::ReduceOp::BOR ? "BOR"
                                                : "BXOR",
                    " needs integer or bool tensors (got ", t.scalar_type(), ")");
        return COLL_SUM; /* unused: the job runs bitwise_all */
    default:
        TORCH_CHECK(false, "kcoll: reduce op ", static_cast<int>(op),
                    " is not supported (kcoll reduces with SUM, PRODUCT, MIN, MAX, AVG, "
                    "PREMUL_SUM, BAND, BOR and BXOR)");
    }
}

bool is_bitwise(const c10d::ReduceOp &op)
{
    return op == c10d::ReduceOp::BAND || op == c10d::ReduceOp::BOR || op == c10d::ReduceOp::BXOR;
}

/* The tensors' elements one after the other, in a new 1-d tensor. */
at::Tensor flat_cat(const std::vector<at::Tensor> &ts)
{
    std::vector<at::Tensor> parts;
    for (const auto &t : ts)
        parts.push_back(t.reshape({-1}));
    return at::cat(parts);
}

void check_tensor(const at::Tensor &t, const char *op)
{
    TORCH_CHECK(t.layout() == at::kStrided, "kcoll: ", op, ": only dense tensors (got ", t.layout(),
                ")");
#if defined(KCOLL_TORCH_CUDA)
    TORCH_CHECK(t.is_cpu() || t.is_cuda(), "kcoll: ", op, ": tensors on ", t.device(),
                " are not supported (cpu and cuda are)");
#else
    TORCH_CHECK(t.is_cpu(), "kcoll: ", op, ": tensors on ", t.device(),
                " are not supported by this build (cpu only: PyTorch without CUDA)");
#endif
}

at::Tensor Staging::in(const at::Tensor &t)
{
    if (t.is_contiguous())
        return t;
    keep_.push_back(t.contiguous());
    return keep_.back();
}

at::Tensor Staging::out(const at::Tensor &t, bool keep)
{
    if (t.is_contiguous())
        return t;
    TORCH_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, "kcoll: ", op_,
                ": an output tensor whose elements share memory (an expand()ed view, strides ",
                t.strides(), ") cannot hold the result; pass a tensor of its own (.clone())");
    back_.emplace_back(t, keep ? t.contiguous() : at::empty(t.sizes(), t.options()));
    return back_.back().second;
}

Staging::~Staging()
{
    for (coll_request_t r : requests_)
        coll_request_free(r); /* complete, or its communicator failed (Worker::settle) */
}

void Staging::finish()
{
    for (auto &b : back_)
        b.first.copy_(b.second);
    back_.clear();
}

at::Tensor one_tensor(const std::vector<at::Tensor> &ts, const char *op)
{
    TORCH_CHECK(ts.size() == 1, "kcoll: ", op, ": one tensor per call (got ", ts.size(),
                "; one process per device)");
    check_tensor(ts[0], op);
    return ts[0];
}

/* The stream a device buffer's call is ordered on: PyTorch's current one (on the worker, the
 * issuing thread's: see stream_for); NULL for host buffers. */
coll_stream_t stream_of(const at::Tensor &t)
{
#if defined(KCOLL_TORCH_CUDA)
    if (t.is_cuda())
        return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#endif
    (void)t;
    return nullptr;
}
OpFor::OpFor(const c10d::ReduceOp &rop, coll_op_t op, const at::Tensor &t, coll_comm_t comm)
    : op_(op), comm_(comm)
{
    if (rop != c10d::ReduceOp::PREMUL_SUM)
        return;
    auto *s = dynamic_cast<c10d::NCCLPreMulSumSupplement *>(rop.supplement_.get());
    TORCH_CHECK(s != nullptr, "kcoll: PREMUL_SUM without its factor");
    at::Tensor f = KCOLL_TORCH_PREMUL_TENSOR(s);
    auto cpu = at::TensorOptions().dtype(t.scalar_type());
    f = f.defined() ? f.to(at::kCPU, t.scalar_type()).reshape({}).contiguous()
                    : at::scalar_tensor(s->double_factor, cpu);
    check(coll_op_create_premul_sum(&op_, f.data_ptr(), dtype_of(t), COLL_SCALAR_IMMEDIATE, comm),
          "coll_op_create_premul_sum");
    made_ = true;
}

OpFor::~OpFor()
{
    if (made_)
        (void)coll_op_destroy(op_, comm_); /* the collective ran; nothing to report here */
}

/* The benchmark's reference: iters coll_all_reduce calls (float32 sum, in place) on t from C,
 * with no Python and no worker thread in between; seconds per call. */
double time_all_reduce(const std::shared_ptr<Comm> &comm, at::Tensor t, int iters)
{
    check_tensor(t, "time_all_reduce");
    TORCH_CHECK(t.is_cpu() && t.is_contiguous() && iters > 0,
                "kcoll: time_all_reduce: a contiguous cpu tensor, iters > 0");
    coll_datatype_t dt = dtype_of(t);
    py::gil_scoped_release nogil;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; i++)
        check(coll_all_reduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, COLL_SUM, comm->get(),
                              nullptr),
              "coll_all_reduce");
    std::chrono::duration<double> d = std::chrono::steady_clock::now() - t0;
    return d.count() / iters;
}

} // namespace kcoll
