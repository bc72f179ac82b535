"""The Application Load Balancer's idle timeout bounds, which the server presets' request timeouts follow."""

# An ALB closes a connection on which nothing was sent for its idle timeout (1-4000 s, default 60; Elastic Load
# Balancing user guide, "Connection idle timeout"): a non-streamed response that takes longer gets an ELB 504. The
# derived timeout is the longest request behind the load balancer plus IDLE_TIMEOUT_MARGIN_SECONDS (the server's
# own timeout answer, queueing and the trip back), and never below the ALB's default.
ALB_MAX_IDLE_TIMEOUT_SECONDS = 4000
ALB_DEFAULT_IDLE_TIMEOUT_SECONDS = 60
IDLE_TIMEOUT_MARGIN_SECONDS = 10
