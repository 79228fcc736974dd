"""The impaired-link test (test_impaired_socket.py) in afxdp mode: 10,000 KServe v2 requests
over 100 keep-alive connections through infergate's fault injector (5% loss, 1% duplication,
1% reordering, both directions), served by the XDP program + AF_XDP socket + infergate's own
TCP stack. Same test body, same assertions; only the gateway's mode differs.

    /usr/bin/python3 test_impaired_afxdp.py --binary build/app/infergate --source .
"""
import os
import runpy
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.argv[1:1] = ["--mode", "afxdp"]
    runpy.run_path(os.path.join(here, "test_impaired_socket.py"), run_name="__main__")
