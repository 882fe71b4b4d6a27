from nodewarden.cli import main

raise SystemExit(main())
