from agentledger.cli import main

main()
